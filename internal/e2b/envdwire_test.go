package e2b

// The wire facts of E2B's envd protocol, as the Go generated from
// proto/process and proto/filesystem into gen/ has them: a change to those
// .proto files that the e2b SDKs would notice fails here.

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	filesystempb "github.com/airlock-sandbox/airlock/gen/filesystem"
	"github.com/airlock-sandbox/airlock/gen/filesystem/filesystempbconnect"
	processpb "github.com/airlock-sandbox/airlock/gen/process"
	"github.com/airlock-sandbox/airlock/gen/process/processpbconnect"
)

// TestEnvdProcedures checks every RPC's URL path and streaming shape
// against the ones the e2b SDKs call: a renamed package, service or method,
// or a stream where the SDK expects a unary call, breaks every client.
func TestEnvdProcedures(t *testing.T) {
	type rpc struct {
		procedure      string
		clientStream   bool
		serverStream   bool
		connectPathVar string // the generated constant, which handlers mount
	}
	services := []struct {
		desc protoreflect.ServiceDescriptor
		rpcs []rpc
	}{
		{processpb.File_process_process_proto.Services().ByName("Process"), []rpc{
			{"/process.Process/List", false, false, processpbconnect.ProcessListProcedure},
			{"/process.Process/Connect", false, true, processpbconnect.ProcessConnectProcedure},
			{"/process.Process/Start", false, true, processpbconnect.ProcessStartProcedure},
			{"/process.Process/Update", false, false, processpbconnect.ProcessUpdateProcedure},
			{"/process.Process/StreamInput", true, false, processpbconnect.ProcessStreamInputProcedure},
			{"/process.Process/SendInput", false, false, processpbconnect.ProcessSendInputProcedure},
			{"/process.Process/SendSignal", false, false, processpbconnect.ProcessSendSignalProcedure},
			{"/process.Process/CloseStdin", false, false, processpbconnect.ProcessCloseStdinProcedure},
		}},
		{filesystempb.File_filesystem_filesystem_proto.Services().ByName("Filesystem"), []rpc{
			{"/filesystem.Filesystem/Stat", false, false, filesystempbconnect.FilesystemStatProcedure},
			{"/filesystem.Filesystem/MakeDir", false, false, filesystempbconnect.FilesystemMakeDirProcedure},
			{"/filesystem.Filesystem/Move", false, false, filesystempbconnect.FilesystemMoveProcedure},
			{"/filesystem.Filesystem/ListDir", false, false, filesystempbconnect.FilesystemListDirProcedure},
			{"/filesystem.Filesystem/Remove", false, false, filesystempbconnect.FilesystemRemoveProcedure},
			{"/filesystem.Filesystem/WatchDir", false, true, filesystempbconnect.FilesystemWatchDirProcedure},
			{"/filesystem.Filesystem/CreateWatcher", false, false, filesystempbconnect.FilesystemCreateWatcherProcedure},
			{"/filesystem.Filesystem/GetWatcherEvents", false, false, filesystempbconnect.FilesystemGetWatcherEventsProcedure},
			{"/filesystem.Filesystem/RemoveWatcher", false, false, filesystempbconnect.FilesystemRemoveWatcherProcedure},
		}},
	}
	for _, s := range services {
		if s.desc == nil {
			t.Fatal("service descriptor missing")
		}
		if got, want := s.desc.Methods().Len(), len(s.rpcs); got != want {
			t.Errorf("%s has %d methods, want %d", s.desc.FullName(), got, want)
		}
		for i, r := range s.rpcs {
			m := s.desc.Methods().Get(i)
			got := "/" + string(s.desc.FullName()) + "/" + string(m.Name())
			if got != r.procedure {
				t.Errorf("method %d of %s = %s, want %s", i, s.desc.FullName(), got, r.procedure)
				continue
			}
			if m.IsStreamingClient() != r.clientStream || m.IsStreamingServer() != r.serverStream {
				t.Errorf("%s streams client=%v server=%v, want client=%v server=%v",
					got, m.IsStreamingClient(), m.IsStreamingServer(), r.clientStream, r.serverStream)
			}
			if r.connectPathVar != r.procedure {
				t.Errorf("generated procedure constant = %s, want %s", r.connectPathVar, r.procedure)
			}
		}
	}
}

// TestEnvdFieldNumbers spot-checks the wire facts the binary codec depends
// on and that are easy to get wrong: numbers that skip, sint32, oneofs and
// proto3 optional fields.
func TestEnvdFieldNumbers(t *testing.T) {
	tests := []struct {
		msg      proto.Message
		field    protoreflect.Name
		number   protoreflect.FieldNumber
		kind     protoreflect.Kind
		oneof    protoreflect.Name // "" for none; "_x" for a proto3 optional
		optional bool              // has explicit presence
	}{
		{&processpb.ProcessEvent_EndEvent{}, "exit_code", 1, protoreflect.Sint32Kind, "", false},
		{&processpb.ProcessEvent_EndEvent{}, "error", 4, protoreflect.StringKind, "_error", true},
		{&processpb.ProcessEvent{}, "keepalive", 4, protoreflect.MessageKind, "event", true},
		{&processpb.ProcessEvent_DataEvent{}, "pty", 3, protoreflect.BytesKind, "output", true},
		{&processpb.StartRequest{}, "stdin", 4, protoreflect.BoolKind, "_stdin", true},
		{&processpb.StartRequest{}, "pty", 2, protoreflect.MessageKind, "_pty", true},
		{&processpb.ProcessConfig{}, "cwd", 4, protoreflect.StringKind, "_cwd", true},
		{&processpb.StreamInputRequest_DataEvent{}, "input", 2, protoreflect.MessageKind, "", true},
		{&processpb.ProcessSelector{}, "tag", 2, protoreflect.StringKind, "selector", true},
		{&filesystempb.EntryInfo{}, "size", 4, protoreflect.Int64Kind, "", false},
		{&filesystempb.EntryInfo{}, "modified_time", 9, protoreflect.MessageKind, "", true},
		{&filesystempb.EntryInfo{}, "symlink_target", 10, protoreflect.StringKind, "_symlink_target", true},
		{&filesystempb.EntryInfo{}, "metadata", 11, protoreflect.MessageKind, "", false},
		{&filesystempb.WatchDirRequest{}, "allow_network_mounts", 4, protoreflect.BoolKind, "", false},
		{&filesystempb.CreateWatcherRequest{}, "allow_network_mounts", 4, protoreflect.BoolKind, "", false},
		{&filesystempb.FilesystemEvent{}, "entry", 3, protoreflect.MessageKind, "_entry", true},
	}
	for _, tt := range tests {
		md := tt.msg.ProtoReflect().Descriptor()
		f := md.Fields().ByName(tt.field)
		if f == nil {
			t.Errorf("%s has no field %s", md.FullName(), tt.field)
			continue
		}
		if f.Number() != tt.number || f.Kind() != tt.kind {
			t.Errorf("%s = %d %s, want %d %s", f.FullName(), f.Number(), f.Kind(), tt.number, tt.kind)
		}
		var oneof protoreflect.Name
		if o := f.ContainingOneof(); o != nil {
			oneof = o.Name()
		}
		if oneof != tt.oneof || f.HasPresence() != tt.optional {
			t.Errorf("%s oneof %q presence %v, want %q %v", f.FullName(), oneof, f.HasPresence(), tt.oneof, tt.optional)
		}
	}
	if got := filesystempb.File_filesystem_filesystem_proto.Messages().ByName("EntryInfo").Fields().ByName("modified_time").Message().FullName(); got != "google.protobuf.Timestamp" {
		t.Errorf("modified_time is %s, want google.protobuf.Timestamp", got)
	}
	signals := map[processpb.Signal]int32{processpb.Signal_SIGNAL_SIGTERM: 15, processpb.Signal_SIGNAL_SIGKILL: 9}
	for s, n := range signals {
		if int32(s) != n {
			t.Errorf("%s = %d, want %d", s, int32(s), n)
		}
	}
}

// TestEnvdJSON checks messages in the JSON form the SDKs use (Connect with
// useBinaryFormat false): lowerCamel names, defaults omitted, int64 as a
// string, enums by name, bytes as base64.
func TestEnvdJSON(t *testing.T) {
	modified := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		msg  proto.Message
		want string
	}{
		{"start", &processpb.StartResponse{Event: &processpb.ProcessEvent{
			Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 42}}}},
			`{"event":{"start":{"pid":42}}}`},
		{"end exit 0", &processpb.StartResponse{Event: &processpb.ProcessEvent{
			Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: 0, Exited: true, Status: "exit status 0"}}}},
			`{"event":{"end":{"exited":true,"status":"exit status 0"}}}`},
		{"end exit 2", &processpb.ConnectResponse{Event: &processpb.ProcessEvent{
			Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: 2, Exited: true, Status: "exit status 2"}}}},
			`{"event":{"end":{"exitCode":2,"exited":true,"status":"exit status 2"}}}`},
		{"stdout", &processpb.StartResponse{Event: &processpb.ProcessEvent{
			Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte("hi\n")}}}}},
			`{"event":{"data":{"stdout":"aGkK"}}}`},
		{"keepalive", &processpb.StartResponse{Event: &processpb.ProcessEvent{
			Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}}}},
			`{"event":{"keepalive":{}}}`},
		{"entry", &filesystempb.StatResponse{Entry: &filesystempb.EntryInfo{
			Name: "a.txt", Type: filesystempb.FileType_FILE_TYPE_FILE, Path: "/home/user/a.txt", Size: 12,
			Mode: 0o644, Permissions: "-rw-r--r--", Owner: "user", Group: "user",
			ModifiedTime: timestamppb.New(modified)}},
			`{"entry":{"name":"a.txt","type":"FILE_TYPE_FILE","path":"/home/user/a.txt","size":"12","mode":420,` +
				`"permissions":"-rw-r--r--","owner":"user","group":"user","modifiedTime":"2026-01-02T03:04:05Z"}}`},
		{"watcher", &filesystempb.CreateWatcherResponse{WatcherId: "w1"}, `{"watcherId":"w1"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := protojson.Marshal(tt.msg)
			if err != nil {
				t.Fatal(err)
			}
			// protojson varies its whitespace on purpose; compare compacted.
			var got bytes.Buffer
			if err := json.Compact(&got, b); err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want {
				t.Errorf("got  %s\nwant %s", got.String(), tt.want)
			}
		})
	}
}

// TestEnvdStartRequest decodes the Start request the JS SDK's
// commands.run sends and checks that an absent stdin is told apart from
// false (absent means true, for SDKs older than envd 0.3.0).
func TestEnvdStartRequest(t *testing.T) {
	var req processpb.StartRequest
	in := `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"},"cwd":"/tmp"},"stdin":false}`
	if err := protojson.Unmarshal([]byte(in), &req); err != nil {
		t.Fatal(err)
	}
	p := req.GetProcess()
	if p.GetCmd() != "/bin/bash" || len(p.GetArgs()) != 3 || p.GetArgs()[2] != "echo hi" || p.GetEnvs()["A"] != "1" {
		t.Errorf("process = %v", p)
	}
	if p.Cwd == nil || p.GetCwd() != "/tmp" {
		t.Errorf("cwd = %v, want /tmp", p.Cwd)
	}
	if req.Stdin == nil || req.GetStdin() {
		t.Errorf("stdin = %v, want present and false", req.Stdin)
	}
	if req.Pty != nil || req.Tag != nil {
		t.Errorf("pty %v tag %v, want absent", req.Pty, req.Tag)
	}

	var legacy processpb.StartRequest
	if err := protojson.Unmarshal([]byte(`{"process":{"cmd":"ls"}}`), &legacy); err != nil {
		t.Fatal(err)
	}
	if legacy.Stdin != nil {
		t.Errorf("stdin = %v, want absent", *legacy.Stdin)
	}

	// Binary round trip (the Connect proto codec).
	b, err := proto.Marshal(&req)
	if err != nil {
		t.Fatal(err)
	}
	var back processpb.StartRequest
	if err := proto.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&req, &back) {
		t.Errorf("binary round trip = %v, want %v", &back, &req)
	}
}
