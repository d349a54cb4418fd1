package payments

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"

	"github.com/qasync/qasync/shared/pipeline"
)

// Header is the header row a payments file starts with (names compared
// case-insensitively, spaces around them ignored).
var Header = []string{"payment_id", "payee", "amount", "currency"}

// FileRequest is payments.file's input.
type FileRequest struct {
	// File is the URI of the CSV file: file:///abs/path or
	// s3://bucket/key.
	File string `json:"file"`
}

// Row is one data row of a payments file: a payments.item's input.
type Row struct {
	// Line is the row's line number in the file (the header is line 1).
	Line int `json:"line"`
	// Fields are the row's fields as read, in Header's order when the row
	// is well-formed.
	Fields []string `json:"fields"`
	// Problem is what the file itself says is wrong with the row (a CSV
	// syntax error, a payment id an earlier row has): validate rejects
	// such a row.
	Problem string `json:"problem,omitempty"`
}

// Staged is what parse stages next to the report for the report step:
// the file and each row's line and payment id, in input order. A map's
// join sees its children's outcomes but not their inputs, and a failed
// child has no output to name its payment by.
type Staged struct {
	File string     `json:"file"`
	Rows []RowIndex `json:"rows"`
}

// RowIndex names one row.
type RowIndex struct {
	Line int `json:"line"`
	// PaymentID is the row's first field as read ("" when it has none).
	PaymentID string `json:"paymentId,omitempty"`
}

// Outcomes of a payment in the Report.
const (
	OutcomeSettled   = "SETTLED"
	OutcomeRejected  = "REJECTED"
	OutcomeFailed    = "FAILED"
	OutcomeCancelled = "CANCELLED"
)

// Report is payments.file's result, published to Config.ReportTo.
type Report struct {
	File string `json:"file"`
	// Total counts the file's data rows; Settled, Rejected, Failed and
	// Cancelled add up to it.
	Total     int `json:"total"`
	Settled   int `json:"settled"`
	Rejected  int `json:"rejected"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	// SettledCents sums the settled amounts per currency.
	SettledCents map[string]int64 `json:"settledCents"`
	// Payments are the rows' outcomes, in input order.
	Payments []Outcome `json:"payments"`
}

// Outcome is one row's outcome.
type Outcome struct {
	Line      int    `json:"line"`
	PaymentID string `json:"paymentId,omitempty"`
	// Outcome is OutcomeSettled, OutcomeRejected, OutcomeFailed or
	// OutcomeCancelled.
	Outcome string `json:"outcome"`
	// ExecutionID is the row's payments.item execution.
	ExecutionID       string `json:"executionId"`
	ProviderPaymentID string `json:"providerPaymentId,omitempty"`
	AmountCents       int64  `json:"amountCents,omitempty"`
	Currency          string `json:"currency,omitempty"`
	// ErrorCode and Error are the child's failure (item_rejected for a
	// rejected row, AWAIT_TIMEOUT for a settlement that never came).
	ErrorCode string `json:"errorCode,omitempty"`
	Error     string `json:"error,omitempty"`
}

// stagedURI is where parse stages the rows of info's execution: the
// report's target with {executionId} expanded to <executionId>.rows.
func (s *Service) stagedURI(info pipeline.StepInfo) string {
	o := pipeline.Output{To: strings.ReplaceAll(s.cfg.ReportTo, "{executionId}", "{executionId}.rows")}
	return o.Target(info)
}

// parse reads the CSV file in.File and emits its data rows.
func (s *Service) parse(ctx context.Context, info pipeline.StepInfo, in FileRequest) ([]Row, error) {
	if info.Objects == nil {
		return nil, pipeline.NonRetryable(CodeInvalidFile, errors.New("payments: the runtime has no object store to read the file with"))
	}
	if !strings.HasPrefix(in.File, "file:///") && !strings.HasPrefix(in.File, "s3://") {
		return nil, pipeline.NonRetryable(CodeInvalidFile, fmt.Errorf("payments: file %q: want file:///abs/path or s3://bucket/key", in.File))
	}
	data, err := info.Objects.Get(ctx, in.File)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, pipeline.NonRetryable(CodeInvalidFile, fmt.Errorf("payments: file %s does not exist", in.File))
	case err != nil:
		return nil, fmt.Errorf("payments: read %s: %w", in.File, err) // retryable
	}
	rows, err := ParseCSV(data)
	if err != nil {
		return nil, pipeline.NonRetryable(CodeInvalidFile, fmt.Errorf("payments: file %s: %w", in.File, err))
	}
	staged := Staged{File: in.File, Rows: make([]RowIndex, len(rows))}
	for i, r := range rows {
		staged.Rows[i].Line = r.Line
		if len(r.Fields) > 0 {
			staged.Rows[i].PaymentID = strings.TrimSpace(r.Fields[0])
		}
	}
	b, err := json.Marshal(staged)
	if err != nil {
		return nil, pipeline.NonRetryable(CodeInvalidFile, fmt.Errorf("payments: stage rows: %w", err))
	}
	// Deterministic bytes: a retried parse writes the same object again.
	if err := info.Objects.Put(ctx, s.stagedURI(info), b, "application/json"); err != nil {
		return nil, fmt.Errorf("payments: stage rows: %w", err) // retryable
	}
	logger(info).LogAttrs(ctx, slog.LevelInfo, "payments_file_parsed", slog.String("event", "payments_file_parsed"),
		slog.Int("rows", len(rows)), slog.Int("bytes", len(data)))
	return rows, nil
}

// ParseCSV reads a payments file: its header, then one Row per data row,
// malformed rows included (a row with a CSV syntax error carries it as
// its Problem; a row repeating an earlier payment id is marked too).
// Empty lines are skipped. It fails when the header is not Header or the
// file has more data rows than a map takes (pipeline.MaxChildren).
func ParseCSV(data []byte) ([]Row, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1 // a row with a wrong field count is the child's to reject
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("no header row (%v)", err)
	}
	if len(head) != len(Header) {
		return nil, fmt.Errorf("header has %d columns, want %s", len(head), strings.Join(Header, ","))
	}
	for i, h := range head {
		if !strings.EqualFold(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")), Header[i]) {
			return nil, fmt.Errorf("header column %d is %q, want %s", i+1, h, strings.Join(Header, ","))
		}
	}
	var rows []Row
	first := map[string]int{} // payment id -> line of its first row
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		row := Row{Fields: rec}
		var pe *csv.ParseError
		switch {
		case errors.As(err, &pe):
			row.Line, row.Problem = pe.StartLine, pe.Err.Error()
		case err != nil:
			return nil, err
		default:
			row.Line, _ = r.FieldPos(0)
			if id := strings.TrimSpace(rec[0]); id != "" {
				if at, dup := first[id]; dup {
					row.Problem = fmt.Sprintf("payment id repeats the row on line %d", at)
				} else {
					first[id] = row.Line
				}
			}
		}
		if len(rows) == pipeline.MaxChildren {
			return nil, fmt.Errorf("more than %d data rows (split the file)", pipeline.MaxChildren)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// report joins the children's outcomes with the staged rows.
func (s *Service) report(ctx context.Context, info pipeline.StepInfo, m pipeline.MapResult) (Report, error) {
	if info.Objects == nil {
		return Report{}, pipeline.NonRetryable(CodeInvalidFile, errors.New("payments: the runtime has no object store to read the staged rows from"))
	}
	raw, err := info.Objects.Get(ctx, s.stagedURI(info))
	if err != nil {
		return Report{}, fmt.Errorf("payments: read staged rows: %w", err) // retryable
	}
	var staged Staged
	if err := json.Unmarshal(raw, &staged); err != nil {
		return Report{}, pipeline.NonRetryable(CodeInvalidFile, fmt.Errorf("payments: staged rows: %w", err))
	}
	if len(staged.Rows) != m.Total || len(m.Elements) != m.Total {
		return Report{}, pipeline.NonRetryable(CodeInvalidFile, fmt.Errorf("payments: %d staged rows, %d children, %d elements",
			len(staged.Rows), m.Total, len(m.Elements)))
	}
	rep := Report{File: staged.File, Total: m.Total, SettledCents: map[string]int64{}, Payments: make([]Outcome, m.Total)}
	for i, el := range m.Elements {
		o := Outcome{Line: staged.Rows[i].Line, PaymentID: staged.Rows[i].PaymentID, ExecutionID: el.ExecutionID,
			ErrorCode: el.ErrorCode, Error: el.ErrorMessage}
		switch {
		case el.Status == "SUCCEEDED":
			var rec Record
			if err := m.Decode(ctx, i, &rec); err != nil {
				return Report{}, fmt.Errorf("payments: outcome of line %d: %w", o.Line, err)
			}
			o.Outcome, o.PaymentID, o.ProviderPaymentID = OutcomeSettled, rec.PaymentID, rec.ProviderPaymentID
			o.AmountCents, o.Currency = rec.AmountCents, rec.Currency
			rep.Settled++
			rep.SettledCents[rec.Currency] += rec.AmountCents
		case el.Rejected:
			o.Outcome = OutcomeRejected
			rep.Rejected++
		case el.Status == "CANCELLED":
			o.Outcome = OutcomeCancelled
			rep.Cancelled++
		default:
			o.Outcome = OutcomeFailed
			rep.Failed++
		}
		rep.Payments[i] = o
	}
	logger(info).LogAttrs(ctx, slog.LevelInfo, "payments_reported", slog.String("event", "payments_reported"),
		slog.Int("total", rep.Total), slog.Int("settled", rep.Settled), slog.Int("rejected", rep.Rejected),
		slog.Int("failed", rep.Failed), slog.Int("cancelled", rep.Cancelled))
	return rep, nil
}
