package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

const completionUsage = `usage: airlock completion bash|zsh

Prints a script that completes airlock's commands, subcommands and sandbox
IDs (asked of the daemon with airlock sandbox ls -q) in bash or zsh.

  bash: source <(airlock completion bash)      (or save it to
        /etc/bash_completion.d/airlock)
  zsh:  source <(airlock completion zsh)       (in ~/.zshrc; it uses
        bashcompinit)
`

// completion is one command as completion offers it: its subcommands,
// and whether the word after it (after its subcommand, if any) is a
// sandbox ID.
type completion struct {
	subs []string
	ids  bool
}

// completions are the commands completion offers, the client verbs
// (without aliases) and those of main. TestCompletionCoversVerbs keeps it
// in step with the verbs.
var completions = map[string]completion{
	"sandbox":    {subs: []string{"create", "ls", "get", "rm", "extend"}, ids: true},
	"exec":       {ids: true},
	"run":        {},
	"program":    {},
	"mcp":        {},
	"cp":         {ids: true},
	"shell":      {ids: true},
	"ps":         {ids: true},
	"stats":      {ids: true},
	"kill":       {ids: true},
	"port":       {ids: true},
	"code":       {ids: true},
	"files":      {subs: []string{"ls", "mkdir", "rm"}, ids: true},
	"contexts":   {subs: []string{"ls", "rm", "restart", "interrupt"}, ids: true},
	"template":   {subs: []string{"build", "import", "ls", "inspect", "rm"}},
	"audit":      {subs: []string{"verify", "checkpoint"}},
	"net":        {subs: []string{"show", "set", "log"}, ids: true},
	"keys":       {subs: []string{"create", "ls", "revoke"}},
	"secrets":    {subs: []string{"set", "ls", "rm"}},
	"tools":      {subs: []string{"create", "ls", "show", "rm"}},
	"toolsets":   {subs: []string{"create", "ls", "show", "rm"}},
	"approvals":  {subs: []string{"ls", "show", "approve", "deny"}},
	"policy":     {subs: []string{"set", "show", "rm"}},
	"tenants":    {subs: []string{"create", "ls", "rm"}},
	"prune":      {},
	"doctor":     {},
	"completion": {subs: []string{"bash", "zsh"}},
	"serve":      {},
	"demo":       {},
	"version":    {},
	"help":       {},
}

// completionAliases are verbs that completion does not offer (another
// name of an offered one).
var completionAliases = map[string]bool{"sandboxes": true, "key": true, "secret": true, "tool": true, "toolset": true, "approval": true, "policies": true, "tenant": true, "file": true, "context": true}

func (c *cli) completionCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("completion", completionUsage)
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 1 {
		return 2, usagef("usage: airlock completion bash|zsh")
	}
	var script string
	switch pos[0] {
	case "bash":
		script = bashCompletion()
	case "zsh":
		script = "#compdef airlock\n# zsh completion for airlock: source <(airlock completion zsh)\n" +
			"autoload -U +X bashcompinit && bashcompinit\n" + bashCompletion()
	default:
		return 2, usagef("unknown shell %q; want bash or zsh", pos[0])
	}
	_, err = fmt.Fprint(c.stdout, script)
	return fail(err)
}

// bashCompletion is the bash completion script (zsh runs it through
// bashcompinit).
func bashCompletion() string {
	names := make([]string, 0, len(completions))
	for n := range completions {
		names = append(names, n)
	}
	sort.Strings(names)
	var subs, ids strings.Builder
	for _, n := range names {
		cm := completions[n]
		if len(cm.subs) > 0 {
			fmt.Fprintf(&subs, "    %s) words=%q ;;\n", n, strings.Join(cm.subs, " "))
		}
		if cm.ids {
			fmt.Fprintf(&ids, "%s|", n)
		}
	}
	idCase := strings.TrimSuffix(ids.String(), "|")
	return `# bash completion for airlock: source <(airlock completion bash)
_airlock() {
  local cur cmd="" sub="" nargs=0 i w words=""
  cur="${COMP_WORDS[COMP_CWORD]}"
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    case "$w" in
      --url|-t|--template|-e|--env|-m|--metadata|-u|--user|-w|--workdir|--timeout|-l|-c|-f|--context) ((i++)) ;;
      -*) ;;
      *)
        if [[ -z "$cmd" ]]; then cmd="$w"
        elif [[ -z "$sub" ]]; then sub="$w"; nargs=1
        else ((nargs++))
        fi ;;
    esac
  done
  if [[ "$cur" == -* ]]; then return; fi
  if [[ -z "$cmd" ]]; then
    COMPREPLY=($(compgen -W "` + strings.Join(names, " ") + `" -- "$cur"))
    return
  fi
  case "$cmd" in
` + subs.String() + `  esac
  if [[ -n "$words" && -z "$sub" ]]; then
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
    return
  fi
  # A sandbox ID: the first argument of an ID-taking command (after its
  # subcommand, if it has subcommands).
  case "$cmd" in
    ` + idCase + `)
      if { [[ -n "$words" ]] && ((nargs == 1)); } || { [[ -z "$words" ]] && [[ -z "$sub" ]]; }; then
        COMPREPLY=($(compgen -W "$(command airlock sandbox ls -q 2>/dev/null)" -- "$cur"))
      fi ;;
  esac
}
complete -o default -F _airlock airlock
`
}
