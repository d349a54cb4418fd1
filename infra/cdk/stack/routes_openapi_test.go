package stack

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRoutesFollowTheOpenAPIDocument: every operation of the HTTP API's
// OpenAPI document (the one qasync serve and the submit function serve)
// is a route of the stack, and every route of the stack is in the
// document. A route the server gained without one here would answer 404
// from API Gateway in every deployed stack (GET /v1/pipelines did, until
// this test).
func TestRoutesFollowTheOpenAPIDocument(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "internal", "httpapi", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			switch method {
			case "get", "post", "put", "patch", "delete":
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	var routed []string
	for _, r := range Routes {
		routed = append(routed, r.Key())
	}
	slices.Sort(documented)
	slices.Sort(routed)
	for _, k := range documented {
		if !slices.Contains(routed, k) {
			t.Errorf("the API serves %s, the stack has no route for it (add it to Routes)", k)
		}
	}
	for _, k := range routed {
		if !slices.Contains(documented, k) {
			t.Errorf("the stack routes %s, the API's OpenAPI document has no such operation", k)
		}
	}
}
