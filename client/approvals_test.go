package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"testing"
)

// TestApprovalRequests: each approval method sends its method, path,
// query and body, and decodes the answer; a malformed ID is refused
// before any request.
func TestApprovalRequests(t *testing.T) {
	const id = "ap-abcdefghijklmn23"
	const ap = `{"id":"` + id + `","state":"pending","sandbox":"sb-1","key_id":"k","tool":"pay","args":{"a":1},"hash":"00","created_at":"2026-01-02T03:04:05Z","expires_at":"2026-01-02T03:09:05Z"}`
	var got []string
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+string(b))
		switch r.Method + " " + r.URL.Path {
		case "GET /prefix/v1/approvals":
			io.WriteString(w, `{"approvals":[`+ap+`]}`)
		case "GET /prefix/v1/approvals/" + id:
			io.WriteString(w, ap)
		case "POST /prefix/v1/approvals/" + id:
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"code":"failed_precondition","message":"approval is already denied"}}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"code":"not_found","message":"no such route"}}`)
		}
	})
	ctx := context.Background()
	if l, err := c.ListApprovals(ctx, ""); err != nil || len(l) != 1 || l[0].Tool != "pay" || string(l[0].Args) != `{"a":1}` {
		t.Errorf("ListApprovals = %+v, %v", l, err)
	}
	if _, err := c.ListApprovals(ctx, ApprovalPending); err != nil {
		t.Errorf("ListApprovals(pending): %v", err)
	}
	if a, err := c.GetApproval(ctx, id); err != nil || a.ID != id || a.State != ApprovalPending || a.CreatedAt.IsZero() {
		t.Errorf("GetApproval = %+v, %v", a, err)
	}
	if _, err := c.DecideApproval(ctx, id, false, "no"); !errors.Is(err, ErrConflict) {
		t.Errorf("DecideApproval of an ended one = %v, want ErrConflict", err)
	}
	_, _ = c.DecideApproval(ctx, id, true, "")
	for _, bad := range []string{"", "ap-short", "../v1/keys", "ap-ABCDEFGHIJKLMNOP"} {
		if _, err := c.GetApproval(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("GetApproval(%q) = %v, want ErrInvalid", bad, err)
		}
		if _, err := c.DecideApproval(ctx, bad, true, ""); !errors.Is(err, ErrInvalid) {
			t.Errorf("DecideApproval(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	want := []string{
		"GET /prefix/v1/approvals ",
		"GET /prefix/v1/approvals?state=pending ",
		"GET /prefix/v1/approvals/" + id + " ",
		"POST /prefix/v1/approvals/" + id + ` {"decision":"deny","reason":"no"}`,
		"POST /prefix/v1/approvals/" + id + ` {"decision":"approve"}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("requests:\n%q\nwant\n%q", got, want)
	}
}
