package main

import (
	"os"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/config"
)

// TestReadmeConfigTableIsCurrent keeps the configuration table of
// docs/configuration.md equal to what `qasync keys` prints.
func TestReadmeConfigTableIsCurrent(t *testing.T) {
	readme, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), config.MarkdownTable()) {
		t.Fatal("docs/configuration.md's configuration table is stale: replace it with the output of `go run ./cmd/qasync keys`")
	}
}
