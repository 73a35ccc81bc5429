package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"
)

func TestAuditListRequest(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Method != "GET" || r.URL.Path != "/prefix/v1/audit" || q.Get("action") != "sandbox.exec" || q.Get("target") != "sb-x" ||
			q.Get("since") != "2026-01-02T02:04:05Z" || q.Has("until") || q.Get("after") != "7" || q.Get("limit") != "2" ||
			q.Get("phase") != "outcome" {
			t.Errorf("request %s %s", r.Method, r.URL)
		}
		io.WriteString(w, `{"records":[{"seq":8,"time":"2026-01-02T03:00:00Z","action":"sandbox.exec","outcome":"ok","phase":"outcome","intent_seq":6,"details":{"exit_code":3,"intent_seq":6},"prev_hash":"a","hash":"b"}],"next_after":8}`)
	})
	recs, next, err := c.AuditList(context.Background(), AuditQuery{Action: "sandbox.exec", Target: "sb-x", Since: since, After: 7, Limit: 2,
		Phase: PhaseOutcome})
	if err != nil || next != 8 || len(recs) != 1 || recs[0].Seq != 8 || string(recs[0].Details) != `{"exit_code":3,"intent_seq":6}` ||
		recs[0].Phase != PhaseOutcome || recs[0].IntentSeq != 6 {
		t.Errorf("AuditList = %+v, %d, %v", recs, next, err)
	}
	if _, _, err := c.AuditList(context.Background(), AuditQuery{Limit: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative limit: %v", err)
	}
}

func TestAuditVerifyRequest(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Checkpoints []AuditHead `json:"checkpoints"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || r.Method != "POST" || r.URL.Path != "/prefix/v1/audit/verify" ||
			len(in.Checkpoints) != 1 || in.Checkpoints[0].Seq != 3 {
			t.Errorf("request %s %s %+v %v", r.Method, r.URL, in, err)
		}
		io.WriteString(w, `{"ok":false,"records":5,"first_bad_seq":3,"reason":"hash mismatch","head":{"seq":9,"hash":"h"},"open_intents":2,"open_intent_seqs":[4]}`)
	})
	rep, err := c.AuditVerify(context.Background(), AuditHead{Seq: 3, Hash: "x"})
	if err != nil || rep.OK || rep.Records != 5 || rep.FirstBadSeq != 3 || rep.Reason != "hash mismatch" || rep.Head.Seq != 9 ||
		rep.OpenIntents != 2 || len(rep.OpenIntentSeqs) != 1 || rep.OpenIntentSeqs[0] != 4 {
		t.Errorf("AuditVerify = %+v, %v", rep, err)
	}
}

func TestAuditCheckpointRequests(t *testing.T) {
	signed := AuditCheckpoint{Seq: 9, Hash: "h9", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), KeyID: "k", Signature: "s"}
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method + " " + r.URL.Path {
		case "GET /prefix/v1/audit/checkpoint":
			io.WriteString(w, `{"checkpoint":{"seq":9,"hash":"h9","time":"2026-01-02T03:04:05Z","key_id":"k","signature":"s"},"public_key":"PEM"}`)
		case "POST /prefix/v1/audit/verify":
			var in struct {
				Checkpoints []map[string]any `json:"checkpoints"`
			}
			if err := json.NewDecoder(r.Body).Decode(&in); err != nil || len(in.Checkpoints) != 2 {
				t.Fatalf("verify body %+v, %v", in, err)
			}
			// An unsigned checkpoint is a bare seq and hash; a signed one
			// goes as it came.
			if len(in.Checkpoints[0]) != 2 || in.Checkpoints[0]["seq"] != 3.0 || len(in.Checkpoints[1]) != 5 ||
				in.Checkpoints[1]["time"] != "2026-01-02T03:04:05Z" || in.Checkpoints[1]["signature"] != "s" {
				t.Errorf("checkpoints sent: %+v", in.Checkpoints)
			}
			io.WriteString(w, `{"ok":false,"records":5,"first_bad_seq":6,"reason":"log ends at seq 5 but checkpoint seq 9 exists","head":{"seq":5,"hash":"h"}}`)
		default:
			t.Errorf("request %s %s", r.Method, r.URL)
		}
	})
	got, err := c.AuditCheckpoint(context.Background())
	if err != nil || got.Checkpoint != signed || got.PublicKey != "PEM" {
		t.Errorf("AuditCheckpoint = %+v, %v", got, err)
	}
	rep, err := c.AuditVerifyCheckpoints(context.Background(), AuditCheckpoint{Seq: 3, Hash: "h3"}, signed)
	if err != nil || rep.OK || rep.FirstBadSeq != 6 {
		t.Errorf("AuditVerifyCheckpoints = %+v, %v", rep, err)
	}
}

func TestMakeDirRequest(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/prefix/v1/sandboxes/sb-x/files/mkdir" || r.URL.Query().Get("path") != "a b/c" {
			t.Errorf("request %s %s", r.Method, r.URL)
		}
		io.WriteString(w, `{"name":"c","path":"/home/user/a b/c","type":"dir","mode":493}`)
	})
	fi, err := c.MakeDir(context.Background(), "sb-x", "a b/c")
	if err != nil || fi.Type != "dir" || fi.Path != "/home/user/a b/c" || fi.Mode != 0o755 {
		t.Errorf("MakeDir = %+v, %v", fi, err)
	}
	if _, err := c.MakeDir(context.Background(), "sb-x", ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty path: %v", err)
	}
}
