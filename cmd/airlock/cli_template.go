package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/template/airfile"
)

const templateUsage = `usage:
  airlock template build NAME (--from IMAGE | --debian SUITE [--packages P,...] | -f AIRFILE [CONTEXT_DIR])
                         [--shared] [--replace] [--allow-setuid] [--no-cache]
                         [--memory MB] [--cpus N] [--pids N] [--disk MB] [--allow ENTRY]...
                         [--toolset NAME]... [--command-policy FILE]
                         [--username U [--password P]] [--insecure] [-v] [--json]
      Build or import a template of your tenant (needs templates:write),
      which only your tenant sees; --shared builds one every tenant sees
      (the operator's). A name resolves to your tenant's template, then
      the shared one. --from pulls an image from its registry (so does
      an Airfile's FROM IMAGE), which only the operator may: other keys
      build from --from template:NAME or --debian, which builds a Debian
      root filesystem with the given packages;
      -f builds from an Airfile (- for standard input). An Airfile with
      COPY or ADD, or given a CONTEXT_DIR, sends that directory (default:
      the Airfile's own) as the build context. --replace replaces a
      template of that name. Set-user-ID and set-group-ID bits are stripped
      unless --allow-setuid (sandboxes mount their root nosuid). --memory,
      --cpus, --pids and --disk set the template's default limits, which
      its sandboxes get unless they ask for others; --allow sets its
      default network (mode allowlist with those destinations, as in
      airlock net set), which a sandbox created without --allow gets.
      --toolset names its default toolsets, which a sandbox created
      without tools or toolsets is granted (resolved for the creating
      tenant); --command-policy sets its default command policy for exec
      from a JSON file ({"default": "allow|ask|deny", "rules": [{"action":
      ..., "prefix": [...]}]}), which a sandbox created without one gets.
      Without them a --from template:NAME build keeps its base's. The
      registry password can come from AIRLOCK_REGISTRY_PASSWORD. Progress goes to standard
      error: a line per step and layer, how many lines of output a step
      printed, the last lines of a step that failed, and a summary; -v
      (--verbose) shows every line of output. Dockerfile instructions that
      mean nothing for a template (EXPOSE, LABEL, MAINTAINER, CMD,
      ENTRYPOINT, HEALTHCHECK, STOPSIGNAL) are ignored with a warning.
  airlock template import NAME FILE|DIR|- [--tag T] [--shared] [--replace] [--allow-setuid] [--json]
      Import a template from a docker save archive (docker save -o app.tar
      IMAGE; - reads it from standard input: docker save IMAGE | airlock
      template import app -), an OCI layout directory, or an OCI layout as
      a tar (oci-archive). --tag picks the image of an archive that holds
      several (repo:tag, or a layout's reference name). No registry is
      contacted: any key with templates:write may import.
  airlock template ls [--json]
      List your tenant's templates and the shared ones, and the disk use
      of their layers (the whole store's for the operator).
  airlock template inspect [--shared] NAME [--json]
  airlock template rm [--shared] NAME... [--json]
      Remove templates (not while a sandbox uses them) and the layers no
      other template uses: your tenant's of that name, else the shared
      one (the operator's to remove). --shared names the shared one even
      when your tenant has one of that name.
`

// envRegistryPassword is the environment variable --password defaults to.
const envRegistryPassword = "AIRLOCK_REGISTRY_PASSWORD"

func (c *cli) templateCmd(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, usagef("template needs a subcommand: build, import, ls, inspect or rm (see airlock template -h)")
	}
	switch args[0] {
	case "build":
		return c.templateBuild(ctx, args[1:])
	case "import", "load":
		return c.templateImport(ctx, args[1:])
	case "ls", "list":
		return c.templateList(ctx, args[1:])
	case "inspect", "get":
		return c.templateInspect(ctx, args[1:])
	case "rm", "remove":
		return c.templateRemove(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, templateUsage)
		return 0, errHelp
	}
	return 2, usagef("unknown template subcommand %q; want build, import, ls, inspect or rm", args[0])
}

// buildPlan is what template build sends: a JSON request, or a build
// context (Context.ContextDir set).
type buildPlan struct {
	JSON    *client.BuildTemplateRequest
	Context *client.BuildContextRequest
}

// buildFlags are the flags of template build.
type buildFlags struct {
	from, debian, file            string
	packages                      listFlag
	shared                        bool
	replace, allowSetuid, noCache bool
	username, password            string
	insecure, asJSON              bool
	limitFlags
	// allow is the template's default network (allowlist mode).
	allow allowFlag
	// toolsets and policyFile are the template's default toolsets and
	// the file of its default command policy.
	toolsets   listFlag
	policyFile string
}

// maxPolicyFile caps a --command-policy file.
const maxPolicyFile = 64 << 10

// commandPolicy reads the --command-policy file, nil without one.
func (f *buildFlags) commandPolicy() (*client.CommandPolicy, error) {
	if f.policyFile == "" {
		return nil, nil
	}
	fh, err := os.Open(f.policyFile)
	if err != nil {
		return nil, &cliError{msg: fmt.Sprintf("cannot read the command policy: %v", err), err: err}
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxPolicyFile+1))
	switch {
	case err != nil:
		return nil, &cliError{msg: fmt.Sprintf("cannot read the command policy: %v", err), err: err}
	case len(b) > maxPolicyFile:
		return nil, usagef("the command policy file is larger than %d bytes", maxPolicyFile)
	}
	var p client.CommandPolicy
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, usagef("--command-policy %s: not a command policy (a JSON object with default and rules): %v", f.policyFile, err)
	}
	return &p, nil
}

// plan checks the flags and positional arguments and turns them into the
// request to send; stdin is read for -f -.
func (f *buildFlags) plan(pos []string, getenv func(string) string, stdin io.Reader) (buildPlan, error) {
	var p buildPlan
	if len(pos) == 0 {
		return p, usagef("template build needs a NAME (see airlock template -h)")
	}
	name, rest := pos[0], pos[1:]
	n := 0
	for _, s := range []string{f.from, f.debian, f.file} {
		if s != "" {
			n++
		}
	}
	switch {
	case n != 1:
		return p, usagef("give one of --from IMAGE, --debian SUITE or -f AIRFILE")
	case len(f.packages) > 0 && f.debian == "":
		return p, usagef("--packages goes with --debian")
	case len(rest) > 0 && f.file == "":
		return p, usagef("a CONTEXT_DIR goes with -f AIRFILE")
	case len(rest) > 1:
		return p, usagef("template build takes NAME and at most one CONTEXT_DIR, got %q", rest[1])
	}
	var auth *client.RegistryAuth
	password := f.password
	if password == "" {
		password = getenv(envRegistryPassword)
	}
	switch {
	case f.username != "" && password == "":
		return p, usagef("--username needs a password: --password or %s", envRegistryPassword)
	case f.username == "" && f.password != "":
		return p, usagef("--password needs --username")
	case f.username != "":
		auth = &client.RegistryAuth{Username: f.username, Password: password}
	}
	limits, err := f.limits()
	if err != nil {
		return p, err
	}
	policy, err := f.commandPolicy()
	if err != nil {
		return p, err
	}
	if f.file == "" {
		req := &client.BuildTemplateRequest{Name: name, Shared: f.shared, From: f.from, Replace: f.replace, AllowSetuid: f.allowSetuid,
			NoCache: f.noCache, Insecure: f.insecure, RegistryAuth: auth, Limits: limits, Network: f.allow.network(),
			Toolsets: f.toolsets, CommandPolicy: policy}
		if f.debian != "" {
			req.Debian = &client.DebianBase{Suite: f.debian, Packages: f.packages}
		}
		p.JSON = req
		return p, nil
	}
	recipe, err := readRecipe(f.file, stdin)
	if err != nil {
		return p, err
	}
	parsed, err := airfile.Parse(bytes.NewReader(recipe))
	if err != nil {
		return p, &cliError{msg: strings.TrimPrefix(err.Error(), "airfile: "), err: err}
	}
	needsContext := false
	for _, s := range parsed.Steps {
		needsContext = needsContext || s.Kind == airfile.KindCopy || s.Kind == airfile.KindAdd
	}
	if !needsContext && len(rest) == 0 {
		p.JSON = &client.BuildTemplateRequest{Name: name, Shared: f.shared, Airfile: string(recipe), Replace: f.replace, AllowSetuid: f.allowSetuid,
			NoCache: f.noCache, Insecure: f.insecure, RegistryAuth: auth, Limits: limits, Network: f.allow.network(),
			Toolsets: f.toolsets, CommandPolicy: policy}
		return p, nil
	}
	dir := filepath.Dir(f.file)
	if f.file == "-" {
		dir = "."
	}
	if len(rest) == 1 {
		dir = rest[0]
	}
	p.Context = &client.BuildContextRequest{Name: name, Shared: f.shared, Airfile: recipe, ContextDir: dir, Replace: f.replace,
		AllowSetuid: f.allowSetuid, NoCache: f.noCache, Insecure: f.insecure, RegistryAuth: auth, Limits: limits, Network: f.allow.network(),
		Toolsets: f.toolsets, CommandPolicy: policy}
	return p, nil
}

// readRecipe reads the Airfile at path ("-": r), within the API's cap.
func readRecipe(path string, r io.Reader) ([]byte, error) {
	b, err := readInput(path, r, airfile.MaxFileBytes)
	switch {
	case errors.Is(err, errInputTooLarge):
		return nil, usagef("the Airfile is larger than %d bytes", airfile.MaxFileBytes)
	case err != nil:
		return nil, &cliError{msg: fmt.Sprintf("cannot read the Airfile: %v", err), err: err}
	}
	return b, nil
}

func (c *cli) templateBuild(ctx context.Context, args []string) (int, error) {
	fs := c.flags("template build", templateUsage)
	var f buildFlags
	fs.StringVar(&f.from, "from", "", "import the `image` (e.g. docker.io/library/python:3.12)")
	fs.StringVar(&f.debian, "debian", "", "build a Debian root filesystem from `suite` (e.g. bookworm)")
	fs.Var(&f.packages, "packages", "Debian `packages` to install (comma-separated or repeated; with --debian)")
	fs.StringVar(&f.file, "f", "", "build from the Airfile at `path` (- for standard input)")
	fs.BoolVar(&f.shared, "shared", false, "build a template every tenant sees (the operator only)")
	fs.BoolVar(&f.replace, "replace", false, "replace a template of the same name")
	fs.BoolVar(&f.allowSetuid, "allow-setuid", false, "keep set-user-ID and set-group-ID bits (default: stripped)")
	fs.BoolVar(&f.noCache, "no-cache", false, "rebuild every step instead of reusing cached layers")
	fs.StringVar(&f.username, "username", "", "registry `user` name")
	fs.StringVar(&f.password, "password", "", "registry `password` (default: $"+envRegistryPassword+")")
	fs.BoolVar(&f.insecure, "insecure", false, "allow a plain-HTTP registry")
	fs.BoolVar(&f.asJSON, "json", false, "print the template as JSON")
	verbose := fs.Bool("verbose", false, "show every line the steps print (default: a progress line, and the last lines of a failed step)")
	fs.BoolVar(verbose, "v", false, "same as --verbose")
	f.limitFlags.register(fs)
	fs.Var(&f.allow, "allow", "default network mode allowlist: a destination `ENTRY` the template's sandboxes may reach (repeatable)")
	fs.Var(&f.toolsets, "toolset", "a default `TOOLSET` granted to the template's sandboxes created without tools (repeatable)")
	fs.StringVar(&f.policyFile, "command-policy", "", "the template's default command policy for exec, a JSON `FILE`")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	p, err := f.plan(pos, c.getenv, c.stdin)
	if err != nil {
		if _, ok := err.(*usageError); ok {
			return 2, err
		}
		return 1, err
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	prog := c.newBuildProgress(*verbose)
	onEvent := func(ev client.BuildEvent) error { prog.event(ev); return nil }
	var tpl *client.TemplateDetail
	if p.JSON != nil {
		tpl, err = cl.BuildTemplate(ctx, *p.JSON, onEvent)
	} else {
		tpl, err = cl.BuildTemplateContext(ctx, *p.Context, onEvent)
	}
	return c.templateDone(prog, tpl, err, f.asJSON)
}

// templateDone ends a build's or an import's display and prints the
// template: a summary line on stderr, then the template's name, layers
// and size (or, with asJSON, the template) on stdout.
func (c *cli) templateDone(prog *buildProgress, tpl *client.TemplateDetail, err error, asJSON bool) (int, error) {
	prog.finish(err)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(c.stderr, "done: %s; %s from %s\n", prog.summary(), tpl.Name, tpl.Source)
	if asJSON {
		return fail(c.printJSON(tpl))
	}
	_, err = fmt.Fprintf(c.stdout, "%s\t%d layers\t%s\n", tpl.Name, tpl.Layers, formatBytes(tpl.Size))
	return fail(err)
}

func (c *cli) templateImport(ctx context.Context, args []string) (int, error) {
	fs := c.flags("template import", templateUsage)
	var req client.ImportTemplateRequest
	fs.StringVar(&req.Tag, "tag", "", "the `image` to import from an archive that holds several (repo:tag; a layout's reference name)")
	fs.BoolVar(&req.Shared, "shared", false, "import a template every tenant sees (the operator only)")
	fs.BoolVar(&req.Replace, "replace", false, "replace a template of the same name")
	fs.BoolVar(&req.AllowSetuid, "allow-setuid", false, "keep set-user-ID and set-group-ID bits (default: stripped)")
	asJSON := fs.Bool("json", false, "print the template as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 2 {
		return 2, usagef("usage: airlock template import NAME FILE|DIR|- [--tag T] (see airlock template -h)")
	}
	req.Name = pos[0]
	if pos[1] == "-" {
		if c.stdin == nil {
			return 2, usagef("no standard input to read the archive from")
		}
		if f, ok := c.stdin.(*os.File); ok && isTerminal(f) {
			return 2, usagef("standard input is a terminal; pipe an archive in (docker save IMAGE | airlock template import NAME -)")
		}
		req.Archive = c.stdin
	} else {
		req.Path = pos[1]
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	prog := c.newBuildProgress(false)
	tpl, err := cl.ImportTemplate(ctx, req, func(ev client.BuildEvent) error { prog.event(ev); return nil })
	return c.templateDone(prog, tpl, err, *asJSON)
}

func (c *cli) templateList(ctx context.Context, args []string) (int, error) {
	fs := c.flags("template ls", templateUsage)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("template ls takes no arguments, got %q", pos[0])
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	list, err := cl.ListTemplates(ctx)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(list))
	}
	rows := make([][]string, 0, len(list.Templates))
	for _, t := range list.Templates {
		layers, size, shared := "-", "-", "-"
		if !t.Builtin {
			layers, size, shared = fmt.Sprint(t.Layers), formatBytes(t.Size), formatBytes(t.SharedBytes)
		}
		rows = append(rows, []string{t.Name, templateScope(t), shortSource(t.Source), layers, size, shared, formatTime(t.Created)})
	}
	if err := c.table([]string{"NAME", "SCOPE", "SOURCE", "LAYERS", "SIZE", "SHARED", "CREATED"}, rows); err != nil {
		return fail(err)
	}
	u := list.Usage
	_, err = fmt.Fprintf(c.stdout, "\nStore: %d layers, %s on disk (%s in layers shared by templates, %s unused)\n",
		u.Layers, formatBytes(u.Bytes), formatBytes(u.SharedBytes), formatBytes(u.UnusedBytes))
	return fail(err)
}

// digestRe matches a sha256 digest.
var digestRe = regexp.MustCompile(`sha256:([0-9a-f]{12})[0-9a-f]{52}`)

// shortSource is a template's source for a table: digests cut to 12 hex
// digits, at most 80 characters (inspect shows it whole).
func shortSource(s string) string {
	return shorten(digestRe.ReplaceAllString(s, "sha256:$1"), 80)
}

// templateScope says whose a template is: "shared" or "tenant".
func templateScope(t client.Template) string {
	if t.Shared {
		return "shared"
	}
	return "tenant"
}

func (c *cli) templateInspect(ctx context.Context, args []string) (int, error) {
	fs := c.flags("template inspect", templateUsage)
	shared := fs.Bool("shared", false, "the shared template of that name, not your tenant's")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 1 {
		return 2, usagef("usage: airlock template inspect NAME")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	get := cl.GetTemplate
	if *shared {
		get = cl.GetSharedTemplate
	}
	t, err := get(ctx, pos[0])
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(t))
	}
	return fail(c.describeTemplate(t))
}

// describeLimits says which limits l sets, "-" for none.
func describeLimits(l *client.Limits) string {
	if l == nil {
		return "-"
	}
	var parts []string
	if l.CPUs != 0 {
		parts = append(parts, fmt.Sprintf("%g CPUs", l.CPUs))
	}
	if l.MemoryMB != 0 {
		parts = append(parts, fmt.Sprintf("%d MB memory", l.MemoryMB))
	}
	if l.DiskMB != 0 {
		parts = append(parts, fmt.Sprintf("%d MB disk", l.DiskMB))
	}
	if l.Pids != 0 {
		parts = append(parts, fmt.Sprintf("%d processes", l.Pids))
	}
	return dash(strings.Join(parts, ", "))
}

// describeNetwork is a template's default network for people.
func describeNetwork(n *client.Network) string {
	if n == nil {
		return "-"
	}
	s := n.Mode
	if len(n.Allow) > 0 {
		s += ": " + strings.Join(n.Allow, " ")
	}
	if l := n.Limits; l != nil {
		s += fmt.Sprintf(" (max %d connections, %d bytes/s, idle %d s; 0: the server's)", l.MaxConnections, l.BandwidthBytesPerS, l.IdleTimeoutS)
	}
	return s
}

// describeCommandPolicy is a template's default command policy for
// people: its default action and its rules.
func describeCommandPolicy(p *client.CommandPolicy) string {
	if p == nil {
		return "-"
	}
	parts := []string{"default " + cmp.Or(p.Default, "allow")}
	for _, r := range p.Rules {
		parts = append(parts, r.Action+" "+strings.Join(r.Prefix, " "))
	}
	return strings.Join(parts, "; ")
}

// describeTemplate prints t for people.
func (c *cli) describeTemplate(t *client.TemplateDetail) error {
	var b strings.Builder
	row := func(k, v string) { fmt.Fprintf(&b, "%-11s %s\n", k+":", v) }
	row("Name", t.Name)
	row("Scope", templateScope(t.Template))
	row("Source", t.Source)
	if t.Builtin {
		row("Built in", "yes (cannot be removed)")
		_, err := io.WriteString(c.stdout, b.String())
		return err
	}
	row("Created", formatTime(t.Created))
	row("Size", fmt.Sprintf("%s in %d layers (%s shared with other templates)", formatBytes(t.Size), t.Layers, formatBytes(t.SharedBytes)))
	row("Workdir", dash(t.Config.Workdir))
	row("User", dash(t.Config.User))
	row("Limits", describeLimits(t.Config.Limits))
	row("Network", describeNetwork(t.Config.Network))
	row("Toolsets", dash(strings.Join(t.Config.Toolsets, " ")))
	row("Cmd policy", describeCommandPolicy(t.Config.CommandPolicy))
	row("Entrypoint", dash(strings.Join(t.Config.Entrypoint, " ")))
	row("Cmd", dash(strings.Join(t.Config.Cmd, " ")))
	if len(t.Config.Env) == 0 {
		row("Env", "-")
	} else {
		b.WriteString("Env:\n")
		for _, e := range t.Config.Env {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	b.WriteString("Layers (lowest first):\n")
	for _, l := range t.LayerList {
		shared := ""
		if l.Shared {
			shared = "  shared"
		}
		fmt.Fprintf(&b, "  %s  %9s  %7d files%s\n", shortDigest(l.Digest), formatBytes(l.Size), l.Files, shared)
	}
	_, err := io.WriteString(c.stdout, b.String())
	return err
}

// shortDigest shows the first 12 hex digits of a sha256 digest.
func shortDigest(d string) string {
	if h, ok := strings.CutPrefix(d, "sha256:"); ok && len(h) > 12 {
		return "sha256:" + h[:12]
	}
	return d
}

// removedJSON is the --json form of a removal.
type removedJSON struct {
	Name        string `json:"name"`
	FreedLayers int    `json:"freed_layers"`
	FreedBytes  int64  `json:"freed_bytes"`
}

func (c *cli) templateRemove(ctx context.Context, args []string) (int, error) {
	fs := c.flags("template rm", templateUsage)
	shared := fs.Bool("shared", false, "remove the shared templates of those names (the operator only)")
	asJSON := fs.Bool("json", false, "print what was removed as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) == 0 {
		return 2, usagef("usage: airlock template rm NAME...")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	failed := 0
	out := []removedJSON{}
	remove := cl.DeleteTemplate
	if *shared {
		remove = cl.DeleteSharedTemplate
	}
	for _, name := range pos {
		freed, err := remove(ctx, name)
		if err != nil {
			failed++
			fmt.Fprintf(c.stderr, "airlock: %s: %v\n", name, friendly(err))
			continue
		}
		out = append(out, removedJSON{Name: name, FreedLayers: freed.Layers, FreedBytes: freed.Bytes})
		if !*asJSON {
			fmt.Fprintf(c.stdout, "%s\tfreed %d layers, %s\n", name, freed.Layers, formatBytes(freed.Bytes))
		}
	}
	if *asJSON {
		if err := c.printJSON(out); err != nil {
			return fail(err)
		}
	}
	if failed > 0 {
		return 1, &cliError{msg: fmt.Sprintf("%d of %d templates were not removed", failed, len(pos))}
	}
	return 0, nil
}

// formatBytes shows n bytes for people (binary units).
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// newBuildProgress returns the progress display of a build on c.stderr:
// redrawn in place on a terminal, plain lines otherwise; verbose shows
// every line of the steps' output.
func (c *cli) newBuildProgress(verbose bool) *buildProgress {
	p := &buildProgress{w: c.stderr, width: 80, now: time.Now, verbose: verbose}
	p.start = p.now()
	if f, ok := c.stderr.(*os.File); ok && isTerminal(f) {
		p.tty = true
		if cols, _, err := termSize(f); err == nil && cols >= 20 {
			p.width = int(cols)
		}
	}
	return p
}

// redrawEvery is the least time between two redraws for progress alone.
const redrawEvery = 100 * time.Millisecond

// buildProgress shows a build's events. On a terminal it keeps a block of
// lines at the bottom, redrawn in place: the current step, then one line
// per layer with a bar of bytes done, then the step's latest line of
// output. In plain mode it prints a line per step and per finished layer,
// and how many lines of output a step printed. The output itself (1,500
// lines of apt for a Debian base) is shown only when verbose, scrolling
// above the block, or, when the build fails, the failing step's last
// lines. Warnings (ignored Airfile instructions) are always shown.
type buildProgress struct {
	w       io.Writer
	tty     bool
	width   int
	now     func() time.Time
	verbose bool

	step   string           // the current step's line
	layers []*layerProgress // of the current step, by layer number - 1
	drawn  int              // lines of the block on screen (tty)
	last   time.Time        // last redraw (tty)

	tail   []string // the current step's last lines of output (not verbose)
	output int      // lines of output of the current step

	start         time.Time // when the build started
	steps, cached int       // steps reported, and of them cached
}

// maxTail is how many lines of a step's output are kept to show when the
// build fails.
const maxTail = 20

// layerProgress is the state of one layer of the current step.
type layerProgress struct {
	n, of       int
	done, total int64
	printed     bool // its completion line was printed (plain)
}

func (p *buildProgress) event(ev client.BuildEvent) {
	switch ev.Type {
	case client.BuildWarning:
		if p.tty {
			p.clear()
		}
		fmt.Fprintln(p.w, "warning: "+printable(ev.Text))
		if p.tty {
			p.redraw()
		}
	case client.BuildStep, client.BuildCached:
		p.endStep()
		p.steps++
		p.step = fmt.Sprintf("step %d/%d: %s", ev.Step, ev.Steps, oneLine(ev.Instruction))
		if ev.Type == client.BuildCached {
			p.cached++
			p.step += " (cached)"
		}
		p.layers = nil
		if p.tty {
			p.drawn = 0 // the last block stays on screen as it was
			p.redraw()
		} else {
			fmt.Fprintln(p.w, p.step)
		}
	case client.BuildLog:
		if !p.verbose {
			p.output++
			if len(p.tail) == maxTail {
				p.tail = p.tail[1:]
			}
			p.tail = append(p.tail, printable(ev.Text))
			if p.tty && p.now().Sub(p.last) >= redrawEvery {
				p.redraw()
			}
			return
		}
		if p.tty {
			p.clear()
			fmt.Fprintln(p.w, printable(ev.Text))
			p.redraw()
		} else {
			fmt.Fprintln(p.w, ev.Text)
		}
	case client.BuildProgress:
		if ev.Layer < 1 || ev.Layer > 1<<16 {
			return
		}
		added := false
		for len(p.layers) < ev.Layer {
			p.layers = append(p.layers, &layerProgress{n: len(p.layers) + 1, of: ev.Layers})
			added = true
		}
		l := p.layers[ev.Layer-1]
		l.of, l.done, l.total = ev.Layers, ev.Done, ev.Total
		if p.tty {
			if added || l.complete() || p.now().Sub(p.last) >= redrawEvery {
				p.redraw()
			}
			return
		}
		// Plain: a line when a layer completes, or when a later one
		// starts (its total was unknown).
		for _, o := range p.layers {
			if !o.printed && (o.complete() || (o.n < ev.Layer && o.done > 0)) {
				o.printed = true
				fmt.Fprintln(p.w, o.plain())
			}
		}
	}
}

// endStep closes the current step: its layers not yet reported (plain),
// and how much output it printed, which is not shown.
func (p *buildProgress) endStep() {
	if p.output > 0 && !p.verbose {
		n := plural(p.output, "line")
		if p.tty {
			p.step += " (" + n + " of output)"
			p.tail = nil
			p.redraw()
		} else {
			p.flushLayers()
			fmt.Fprintf(p.w, "  (%s of output; --verbose shows them)\n", n)
		}
	} else {
		p.flushLayers()
	}
	p.tail, p.output = nil, 0
}

// finish shows the final state (tty) or the layers not yet reported.
// When the build failed (err), the failing step's last lines of output
// are shown, which hold its error.
func (p *buildProgress) finish(err error) {
	tail := p.tail
	p.endStep()
	if err != nil && len(tail) > 0 {
		fmt.Fprintf(p.w, "the last %s of output of the failed step:\n", plural(len(tail), "line"))
		for _, l := range tail {
			fmt.Fprintln(p.w, "  "+l)
		}
	}
}

// summary says what the build did, for people: "3 steps (1 cached) in
// 12.5s".
func (p *buildProgress) summary() string {
	return fmt.Sprintf("%s (%d cached) in %s", plural(p.steps, "step"), p.cached, p.now().Sub(p.start).Round(100*time.Millisecond))
}

// plural is "1 line", "2 lines".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// flushLayers prints, in plain mode, the layers of the step whose line is
// still due.
func (p *buildProgress) flushLayers() {
	if p.tty {
		if p.drawn > 0 {
			p.redraw()
		}
		return
	}
	for _, l := range p.layers {
		if !l.printed && l.done > 0 {
			l.printed = true
			fmt.Fprintln(p.w, l.plain())
		}
	}
}

func (l *layerProgress) complete() bool { return l.total > 0 && l.done >= l.total }

// plain is the line of a finished layer.
func (l *layerProgress) plain() string {
	return fmt.Sprintf("  layer %d/%d: %s", l.n, l.of, formatBytes(l.done))
}

// bar is the line of a layer on a terminal, at most width columns.
func (l *layerProgress) bar(width int) string {
	label := fmt.Sprintf("  layer %d/%d ", l.n, l.of)
	if l.total <= 0 {
		return label + formatBytes(l.done)
	}
	amount := fmt.Sprintf(" %s/%s", formatBytes(min(l.done, l.total)), formatBytes(l.total))
	n := width - 1 - len(label) - len(amount) - 2
	if n < 5 {
		return label + strings.TrimSpace(amount)
	}
	n = min(n, 40)
	fill := int(int64(n) * min(l.done, l.total) / l.total)
	return label + "[" + strings.Repeat("=", fill) + strings.Repeat(" ", n-fill) + "]" + amount
}

// clear removes the block from the terminal, leaving the cursor where it
// started.
func (p *buildProgress) clear() {
	if p.drawn > 0 {
		fmt.Fprintf(p.w, "\x1b[%dA\r\x1b[J", p.drawn)
		p.drawn = 0
	}
}

// redraw draws the block again in place.
func (p *buildProgress) redraw() {
	lines := []string{}
	if p.step != "" {
		lines = append(lines, cut(p.step, p.width-1))
	}
	for _, l := range p.layers {
		lines = append(lines, cut(l.bar(p.width), p.width-1))
	}
	if len(p.tail) > 0 {
		lines = append(lines, cut(fmt.Sprintf("  [%d] %s", p.output, p.tail[len(p.tail)-1]), p.width-1))
	}
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA\r\x1b[J", p.drawn)
	}
	for _, l := range lines {
		b.WriteString(l)
		b.WriteString("\n")
	}
	_, _ = io.WriteString(p.w, b.String())
	p.drawn = len(lines)
	p.last = p.now()
}

// oneLine joins s's lines and drops control characters.
func oneLine(s string) string { return printable(strings.Join(strings.Fields(s), " ")) }

// printable drops control characters (terminal escapes among them) but
// tabs.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r != '\t' && unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
}

// cut shortens s to n runes.
func cut(s string, n int) string {
	r := []rune(s)
	if n < 4 || len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}
