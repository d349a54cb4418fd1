package main

import (
	"fmt"
	"io"
	"strings"
)

// renderTable prints the report as one Markdown table, then the machine,
// the settings and each system's tuning.
func renderTable(w io.Writer, rep Report) {
	var base *Result
	for i := range rep.Results {
		if rep.Results[i].Baseline {
			base = &rep.Results[i]
		}
	}
	fmt.Fprintln(w, "| system | burst steps/s | steady p50 ms | steady p99 ms | CPU ms/step | ratio burst vs qasync | ratio p50 vs qasync |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rep.Results {
		if r.Status == "skipped" {
			fmt.Fprintf(w, "| %s | %s | | | | | |\n", r.System, cell(r.Reason))
			continue
		}
		burst, p50, p99, cpu, rb, rp := "failed", "failed", "failed", "-", "-", "-"
		if b := r.Burst; b != nil {
			burst, cpu = fmt.Sprintf("%.0f", b.StepsPerS), fmt.Sprintf("%.3f", b.CPUMsPerStep)
			if base != nil && base.Burst != nil && base.Burst.StepsPerS > 0 {
				rb = ratio(b.StepsPerS / base.Burst.StepsPerS)
			}
		}
		if s := r.Steady; s != nil && s.Completed == s.Submitted {
			p50, p99 = msCell(s.P50Ms), msCell(s.P99Ms)
			if base != nil && base.Steady != nil && base.Steady.P50Ms > 0 {
				rp = ratio(s.P50Ms / base.Steady.P50Ms)
			}
		}
		name := r.System
		if r.Status == "failed" {
			name += " — failed: " + cell(r.Reason)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", name, burst, p50, p99, cpu, rb, rp)
	}
	m, s := rep.Machine, rep.Settings
	fmt.Fprintf(w, "\nmachine: nproc %d, GOMAXPROCS %d, %s %s", m.NumCPU, m.GOMAXPROCS, m.Go, m.OS)
	if m.CPU != "" {
		fmt.Fprintf(w, ", %s", m.CPU)
	}
	if m.LoadBefore != "" {
		fmt.Fprintf(w, ", load average %s before / %s after (other work on the machine makes figures noisy)", m.LoadBefore, m.LoadAfter)
	}
	fmt.Fprintf(w, "\nsettings: 3-step pipeline, %d workers; burst %d executions (%d steps) from %d submitters; steady %g executions/s for %s (p50/p99 of submit -> last step done)\n",
		s.Workers, s.Executions, s.Steps, s.Submitters, s.Rate, s.Duration)
	fmt.Fprintln(w, "CPU ms/step: user+sys CPU of the system's own process during the burst, plus the server's when it runs on this machine (Postgres: postmaster and backends; Temporal: the dev server); ratios are the row's figure divided by qasync's")
	for _, r := range rep.Results {
		extra := ""
		if b := r.Burst; b != nil {
			extra = fmt.Sprintf(" [burst %.1fs, process CPU %.0f ms", b.Seconds, b.ProcessCPUMs)
			if b.ServerCPUKnown {
				extra += fmt.Sprintf(", server CPU %.0f ms", b.ServerCPUMs)
			}
			extra += "]"
		}
		if r.PeakRSSMiB > 0 {
			extra += fmt.Sprintf(" [peak RSS %.0f MiB]", r.PeakRSSMiB)
		}
		fmt.Fprintf(w, "- %s: %s%s\n", r.System, r.Settings, extra)
	}
}

// ratio formats a ratio with about three significant digits.
func ratio(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0fx", x)
	case x >= 10:
		return fmt.Sprintf("%.1fx", x)
	case x >= 0.1:
		return fmt.Sprintf("%.2fx", x)
	default:
		return fmt.Sprintf("%.3gx", x)
	}
}

func msCell(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// cell keeps a reason on one table line.
func cell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
