package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
)

func TestTenants(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST" && r.URL.Path == "/prefix/v1/tenants":
			var in map[string]any
			if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in["id"] != "acme" || in["name"] != "Acme" || in["max_sandboxes"] != float64(3) {
				t.Errorf("create body %v %v", in, err)
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"acme","name":"Acme","max_sandboxes":3,"created_at":"2026-01-02T03:04:05Z",`+
				`"admin_key":{"id":"k1","key":"al_k1_s","name":"admin","scopes":["admin"],"created_at":"2026-01-02T03:04:05Z","expires_at":null,"last_used_at":null,"revoked_at":null}}`)
		case r.Method == "GET" && r.URL.Path == "/prefix/v1/tenants":
			io.WriteString(w, `{"tenants":[{"id":"acme","name":"Acme","max_sandboxes":3,"created_at":"2026-01-02T03:04:05Z"}]}`)
		case r.Method == "DELETE" && r.URL.Path == "/prefix/v1/tenants/acme":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"code":"failed_precondition","message":"tenant busy has 1 sandboxes; delete them first"}}`)
		}
	})
	ctx := context.Background()
	ct, err := c.CreateTenant(ctx, CreateTenantRequest{ID: "acme", Name: "Acme", MaxSandboxes: 3})
	if err != nil || ct.ID != "acme" || ct.MaxSandboxes != 3 || ct.AdminKey.ID != "k1" || ct.AdminKey.Secret != "al_k1_s" || ct.CreatedAt.IsZero() {
		t.Errorf("CreateTenant = %+v, %v", ct, err)
	}
	list, err := c.ListTenants(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "acme" {
		t.Errorf("ListTenants = %+v, %v", list, err)
	}
	if err := c.DeleteTenant(ctx, "acme"); err != nil {
		t.Errorf("DeleteTenant: %v", err)
	}
	if err := c.DeleteTenant(ctx, "busy"); !errors.Is(err, ErrConflict) {
		t.Errorf("DeleteTenant busy: %v", err)
	}
	for _, id := range []string{"", "a/b", "a?b"} {
		if err := c.DeleteTenant(ctx, id); !errors.Is(err, ErrInvalid) {
			t.Errorf("DeleteTenant(%q): %v", id, err)
		}
	}
}

func TestSharedTemplateRequests(t *testing.T) {
	var seen []string
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		if r.Method == "GET" {
			io.WriteString(w, `{"name":"py","shared":true,"source":"x","builtin":false,"layers":1,"size":1,"shared_bytes":0,"created":null,"layer_list":[],"config":{}}`)
			return
		}
		io.WriteString(w, `{"name":"py","freed_layers":1,"freed_bytes":1}`)
	})
	ctx := context.Background()
	d, err := c.GetSharedTemplate(ctx, "py")
	if err != nil || !d.Shared {
		t.Errorf("GetSharedTemplate = %+v, %v", d, err)
	}
	if _, err := c.GetTemplate(ctx, "py"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteSharedTemplate(ctx, "py"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteTemplate(ctx, "py"); err != nil {
		t.Fatal(err)
	}
	want := []string{"GET /prefix/v1/templates/py?shared=true", "GET /prefix/v1/templates/py?", "DELETE /prefix/v1/templates/py?shared=true", "DELETE /prefix/v1/templates/py?"}
	if len(seen) != len(want) {
		t.Fatalf("requests %v", seen)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("request %d = %s, want %s", i, seen[i], want[i])
		}
	}
}
