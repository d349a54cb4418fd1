package main

import (
	"os"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/config"
)

// TestReadmeConfigTableIsCurrent keeps the README's configuration table
// equal to what `qasync keys` prints.
func TestReadmeConfigTableIsCurrent(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), config.MarkdownTable()) {
		t.Fatal("README.md's configuration table is stale: replace it with the output of `go run ./cmd/qasync keys`")
	}
}
