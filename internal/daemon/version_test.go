package daemon

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	for _, tt := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, "dev-0123456789ab+dirty"},
		{debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}}, "dev-abc"},
	} {
		if got := versionOf(&tt.bi); got != tt.want {
			t.Errorf("versionOf(%+v) = %q, want %q", tt.bi, got, tt.want)
		}
	}
	if Version() == "" {
		t.Error("Version() is empty")
	}
}
