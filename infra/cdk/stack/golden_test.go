package stack

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// goldenTemplate is the dev stack's template as synthesized by the tests
// (placeholder bundles), committed as package devstack of the library,
// which cannot synthesize (it is another module): the topology `qasync
// local` runs by default, and the policies the IAM and local-cloud tests
// enforce.
var goldenTemplate = filepath.Join("..", "..", "..", "shared", "internal", "devstack", "dev.template.json")

// The committed golden template is the fresh synthesis of the dev stack,
// so the topology and the policies local-cloud runs are the stack's own. Regenerate
// with QASYNC_UPDATE_GOLDEN=1 go test ./stack/ -run TestGoldenTemplate.
func TestGoldenTemplate(t *testing.T) {
	v := synth(t, "dev")
	fresh, err := json.MarshalIndent(v.doc, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	fresh = append(fresh, '\n')
	if os.Getenv("QASYNC_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(goldenTemplate, fresh, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	committed, err := os.ReadFile(goldenTemplate)
	if err != nil {
		t.Fatalf("%v (regenerate with QASYNC_UPDATE_GOLDEN=1)", err)
	}
	if !bytes.Equal(committed, fresh) {
		t.Errorf("%s differs from a fresh synthesis of the dev stack: regenerate it with QASYNC_UPDATE_GOLDEN=1 go test ./stack/ -run TestGoldenTemplate", goldenTemplate)
	}
}
