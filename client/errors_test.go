package client

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
)

// TestCodeErrorsCoverTheCodes checks codeErrors against the error codes
// openapi.yaml documents (the Error schema's enum, which package api's
// test keeps equal to its Code constants): each code it maps is one of
// them, and each of them is mapped, except those left to their status.
func TestCodeErrorsCoverTheCodes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Error struct {
							Properties struct {
								Code struct {
									Enum []string `json:"enum"`
								} `json:"code"`
							} `json:"properties"`
						} `json:"error"`
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	codes := doc.Components.Schemas.Error.Properties.Error.Properties.Code.Enum
	if len(codes) == 0 {
		t.Fatal("no error codes in openapi.yaml")
	}
	byStatus := []string{api.CodeUpgradeRequired, api.CodeCanceled}
	for code := range codeErrors {
		if !slices.Contains(codes, code) {
			t.Errorf("codeErrors maps %q, which the API does not send", code)
		}
	}
	for _, code := range codes {
		if _, ok := codeErrors[code]; !ok && !slices.Contains(byStatus, code) {
			t.Errorf("code %q has no sentinel in codeErrors", code)
		}
	}
}
