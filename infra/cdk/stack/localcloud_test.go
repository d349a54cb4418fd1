package stack

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The stack's code is local-cloud's topology: settings changed here (the
// worker's batch size, batching window and timeout, the sweeper's rate,
// the history batch size, the memory, the runtime configuration) are what
// `qasync local` runs once the stack is synthesized, read from the
// template alone (qasync local --local-print-topology prints what it
// would run).
func TestLocalCloudFollowsTheStack(t *testing.T) {
	v := synth(t, "local-cloud")
	dir := t.TempDir()
	tpl := filepath.Join(dir, "local-cloud.template.json")
	b, err := json.Marshal(v.doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tpl, b, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv("QASYNC_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "qasync")
		build := exec.Command("go", "build", "-o", bin, "./cmd/qasync")
		build.Dir = filepath.Join("..", "..", "..")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/qasync: %v\n%s", err, out)
		}
	}
	out, err := exec.Command(bin, "local", "--local-template", tpl, "--local-print-topology").Output()
	if err != nil {
		t.Fatalf("qasync local --local-print-topology: %v", err)
	}
	var topo struct {
		Functions map[string]struct {
			Timeout  time.Duration     `json:"timeout"`
			MemoryMB int               `json:"memoryMB"`
			Env      map[string]string `json:"env"`
		} `json:"functions"`
		Queues []struct {
			ID             string        `json:"id"`
			BatchSize      int           `json:"batchSize"`
			BatchingWindow time.Duration `json:"batchingWindow"`
		} `json:"queues"`
		Streams []struct {
			BatchSize int `json:"batchSize"`
		} `json:"streams"`
		Schedules []struct {
			Every time.Duration `json:"every"`
		} `json:"schedules"`
	}
	if err := json.Unmarshal(out, &topo); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	w := topo.Functions[Worker]
	if w.Timeout != 90*time.Second || w.MemoryMB != 512 || w.Env["PIPELINE_ORCHESTRATOR_MAX_RETRIES"] != "6" {
		t.Errorf("worker: timeout %v, memory %d, max retries %q", w.Timeout, w.MemoryMB, w.Env["PIPELINE_ORCHESTRATOR_MAX_RETRIES"])
	}
	found := false
	for _, q := range topo.Queues {
		if q.ID == "WorkerWorkQueueSource" {
			found = true
			if q.BatchSize != 4 || q.BatchingWindow != 3*time.Second {
				t.Errorf("worker's queue mapping: batch %d, window %v", q.BatchSize, q.BatchingWindow)
			}
		}
	}
	if !found {
		t.Errorf("no worker queue mapping in %s", out)
	}
	if len(topo.Streams) != 1 || topo.Streams[0].BatchSize != 50 {
		t.Errorf("streams %+v", topo.Streams)
	}
	if len(topo.Schedules) != 1 || topo.Schedules[0].Every != 7*time.Minute {
		t.Errorf("schedules %+v", topo.Schedules)
	}
}
