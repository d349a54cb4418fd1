package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/embedded"
)

// backupCmd writes a consistent copy of the embedded store:
//
//	qasync backup --to FILE [--data-dir DIR]
//
// While a qasync serve runs on the directory, the server writes the copy
// (from one read transaction; writers go on) to a temporary file in the
// data directory, then streams it here, so a slow or stalled backup never
// holds up the store; the data directory's disk needs room for one more
// copy of the store while the backup runs. Otherwise the file is read
// directly. The copy is checked before it replaces FILE. The data
// directory defaults to the embedded.data-dir key (environment, then
// .qasync). Restore by copying FILE to DIR/qasync.db while no server runs.
func backupCmd(args []string) int {
	cfg, _, _ := config.Load(os.LookupEnv, nil)
	fs := flag.NewFlagSet("qasync backup", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	to := fs.String("to", "", "file to write the copy to (required)")
	dir := fs.String("data-dir", cfg.EmbeddedDataDir, "the embedded store's data directory ("+config.FullKey("embedded.data-dir")+")")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Println("usage: qasync backup --to FILE [--data-dir DIR]   a consistent copy of the embedded store, also while qasync serve runs")
		fmt.Println("  (a running server first copies the store to a temporary file in DIR: its disk needs room for one more copy meanwhile)")
		return 0
	case err == nil && *to == "":
		err = errors.New("--to FILE is required")
	case err == nil && fs.NArg() > 0:
		err = fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync backup: %v\nusage: qasync backup --to FILE [--data-dir DIR]\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	info, err := embedded.Backup(ctx, *dir, *to)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync backup: %v\n", err)
		return 1
	}
	from := "the file (no server running)"
	if info.FromServer {
		from = "the running server"
	}
	fmt.Printf("backup of %s written to %s: %d bytes, schema version %d, %d executions, copied by %s\n",
		*dir, *to, info.Bytes, info.Schema, info.Executions, from)
	return 0
}
