// Command zipbootstrap packages a Lambda custom-runtime binary: it writes
// a zip holding one entry, "bootstrap", with mode 0755 and a fixed
// timestamp (so the same binary gives the same zip), and prints the
// sizes. It replaces the zip command, which a build machine may lack.
//
// Usage: zipbootstrap <bootstrap binary> <zip file>
package main

import (
	"archive/zip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: zipbootstrap <bootstrap binary> <zip file>")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "zipbootstrap:", err)
		os.Exit(1)
	}
}

func run(bin, out string) error {
	in, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".zipbootstrap-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	zw := zip.NewWriter(tmp)
	hdr := &zip.FileHeader{Name: "bootstrap", Method: zip.Deflate, Modified: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}
	hdr.SetMode(0o755)
	w, err := zw.CreateHeader(hdr)
	if err == nil {
		_, err = io.Copy(w, in)
	}
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = tmp.Close()
	} else {
		tmp.Close()
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	zs, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Printf("%-24s %6.1f MiB  (bootstrap %5.1f MiB)\n", out, mib(zs.Size()), mib(st.Size()))
	return nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
