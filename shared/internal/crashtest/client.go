package crashtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// client bounds every request: a killed server must not hang a test.
var client = &http.Client{Timeout: 15 * time.Second}

// Submitted is the answer to a submit.
type Submitted struct {
	ExecutionID string `json:"executionId"`
	Status      string `json:"status"`
	Duplicate   bool   `json:"duplicate"`
}

// Submit posts body (JSON) to pipelineID's executions on the server at
// addr with the idempotency key, and returns the HTTP status and the
// decoded answer.
func Submit(addr, pipelineID, key string, body []byte) (int, Submitted, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/pipelines/"+pipelineID+"/executions", bytes.NewReader(body))
	if err != nil {
		return 0, Submitted{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, Submitted{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, Submitted{}, err
	}
	var s Submitted
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		return resp.StatusCode, s, fmt.Errorf("crashtest: submit: HTTP %d: %s", resp.StatusCode, b)
	}
	return resp.StatusCode, s, json.Unmarshal(b, &s)
}

// Status is the status document of an execution.
type Status struct {
	ExecutionID string `json:"executionId"`
	PipelineID  string `json:"pipelineId"`
	// PipelineVersion names the pipeline definition the execution is
	// bound to.
	PipelineVersion string `json:"pipelineVersion"`
	Status          string `json:"status"`
	StepIndex       int    `json:"stepIndex"`
	StepName        string `json:"stepName"`
	Attempt         int    `json:"attempt"`
	Version         int64  `json:"version"`
	Error           *struct {
		Code           string `json:"code"`
		Message        string `json:"message"`
		TerminalReason string `json:"terminalReason"`
	} `json:"error"`
}

// GetStatus reads an execution's status from the server at addr.
func GetStatus(addr, id string) (Status, error) {
	resp, err := client.Get("http://" + addr + "/v1/executions/" + id)
	if err != nil {
		return Status{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Status{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Status{}, fmt.Errorf("crashtest: status of %s: HTTP %d: %s", id, resp.StatusCode, b)
	}
	var s Status
	return s, json.Unmarshal(b, &s)
}

// GetResult reads an execution's result bytes from the server at addr;
// it returns the HTTP status with them (409 before success).
func GetResult(addr, id string) (int, []byte, error) {
	resp, err := client.Get("http://" + addr + "/v1/executions/" + id + "/result")
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Terminal reports whether status is settled: SUCCEEDED or DLQ (or
// parked as REMOTE_OUTCOME_UNKNOWN). FAILED is not: through the API it is
// the short window while the dead letter is published, before DLQ.
func Terminal(status string) bool {
	return status == "SUCCEEDED" || status == "DLQ" || status == "REMOTE_OUTCOME_UNKNOWN"
}
