package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// The file's checks at open: a schema version from a newer qasync, a
// truncated file, a damaged value, a torn page and torn meta pages.

var fileEpoch = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

const marker = "MARKER-pipeline-0123456789"

// filled returns a closed store's directory holding n rows whose pipeline
// id is marker.
func filled(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	db, err := Open(dir, Options{Clock: clock.NewFake(fileEpoch), NoControl: true})
	if err != nil {
		t.Fatal(err)
	}
	st := db.State(nil)
	for i := range n {
		e := store.Execution{TenantID: "t1", ExecutionID: fmt.Sprintf("e%04d", i), PipelineID: marker, Status: store.Queued, Version: 1,
			NextDueAt: fileEpoch, CreatedAt: fileEpoch, UpdatedAt: fileEpoch, ExpiresAt: fileEpoch.Add(time.Hour), Fingerprint: "f"}
		if _, _, err := st.CreateOrGet(context.Background(), store.CreateRequest{Execution: e}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func reopen(dir string) error {
	db, err := Open(dir, Options{Clock: clock.NewFake(fileEpoch), NoControl: true})
	if err == nil {
		_ = db.Close()
	}
	return err
}

// TestAcknowledgedWritesAreSynced: the store runs bbolt with its fsyncs
// on (a commit fdatasyncs its pages, then its meta page), and a writer is
// answered only after its commit returned.
func TestAcknowledgedWritesAreSynced(t *testing.T) {
	db, err := Open(t.TempDir(), Options{NoControl: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.bolt.NoSync || db.bolt.NoGrowSync {
		t.Fatal("bbolt runs with NoSync or NoGrowSync: commits would be acknowledged before they are on disk")
	}
	committed := false
	err = db.update(context.Background(), func(t *txn) error {
		t.after(func() { committed = true })
		return t.bucket(bMeta).Put([]byte("probe"), []byte("x"))
	})
	if err != nil || !committed {
		t.Fatalf("update returned (%v) before its commit's effects ran", err)
	}
}

// TestNewerSchemaRefused: a file written by a newer qasync (a higher
// schema version) is refused with a clear error, and left unchanged.
func TestNewerSchemaRefused(t *testing.T) {
	dir := filled(t, 1)
	path := filepath.Join(dir, FileName)
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	newer := SchemaVersion + 1
	if err := b.Update(func(tx *bolt.Tx) error { return tx.Bucket(bMeta).Put([]byte("schema"), fmt.Appendf(nil, "%d", newer)) }); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	before, _ := os.ReadFile(path)
	err = reopen(dir)
	if !errors.Is(err, ErrNewerSchema) || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", newer)) ||
		!strings.Contains(err.Error(), fmt.Sprintf("up to %d", SchemaVersion)) {
		t.Fatalf("Open of a schema %d file: %v, want ErrNewerSchema naming both versions", newer, err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("the refused file was changed")
	}
}

// TestVersion1FileUpgradedAtOpen: a file of schema version 1 (before the
// operator jobs' buckets) opens: its rows are all there, the buckets added
// since are created, the file records the current version, and jobs work.
func TestVersion1FileUpgradedAtOpen(t *testing.T) {
	dir := filled(t, 3)
	path := filepath.Join(dir, FileName)
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		for name, since := range bucketSince {
			if since > 1 {
				if err := tx.DeleteBucket([]byte(name)); err != nil {
					return err
				}
			}
		}
		return tx.Bucket(bMeta).Put([]byte("schema"), []byte("1"))
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	db, err := Open(dir, Options{Clock: clock.NewFake(fileEpoch), NoControl: true})
	if err != nil {
		t.Fatalf("Open of a version 1 file: %v", err)
	}
	defer db.Close()
	ctx := context.Background()
	st := db.State(nil)
	if page, err := st.List(ctx, store.ListQuery{TenantID: "t1"}); err != nil || len(page.Executions) != 3 {
		t.Fatalf("rows after the upgrade: %d, %v; want 3", len(page.Executions), err)
	}
	j := store.Job{Key: store.JobKey{TenantID: "t1", ID: "j"}, Active: true, CreatedAt: fileEpoch, UpdatedAt: fileEpoch, ExpiresAt: fileEpoch.Add(time.Hour)}
	if err := st.CreateJob(ctx, j); err != nil {
		t.Fatalf("CreateJob after the upgrade: %v", err)
	}
	var version string
	_ = db.bolt.View(func(tx *bolt.Tx) error { version = string(tx.Bucket(bMeta).Get([]byte("schema"))); return nil })
	if version != fmt.Sprint(SchemaVersion) {
		t.Fatalf("schema version %s after the upgrade, want %d", version, SchemaVersion)
	}
}

// TestTruncatedFileDetectedAtOpen: a file cut short of what its meta page
// says it holds (a copy cut short, a full disk) is refused at open, not
// mapped and served.
func TestTruncatedFileDetectedAtOpen(t *testing.T) {
	dir := filled(t, 300)
	path := filepath.Join(dir, FileName)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m0, _ := readMeta(f, 0)
	m1, _ := readMeta(f, int64(m0.pageSize))
	_ = f.Close()
	used := int64(max(m0.hwm, m1.hwm)) * int64(m0.pageSize)
	data, _ := os.ReadFile(path)
	for _, size := range []int64{used / 2, used - int64(m0.pageSize), 3 * int64(m0.pageSize), 100} {
		if err := os.WriteFile(path, data[:size], 0o600); err != nil {
			t.Fatal(err)
		}
		if err := reopen(dir); !errors.Is(err, ErrDamaged) {
			t.Fatalf("Open of the file cut to %d of %d bytes: %v, want ErrDamaged", size, used, err)
		}
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := reopen(dir); err != nil {
		t.Fatalf("the whole file again: %v", err)
	}
}

// TestDamagedValueDetectedAtOpen: a value whose bytes changed on disk
// fails its checksum at open.
func TestDamagedValueDetectedAtOpen(t *testing.T) {
	dir := filled(t, 5)
	path := filepath.Join(dir, FileName)
	data, _ := os.ReadFile(path)
	n := 0
	for i := bytes.Index(data, []byte(marker)); i >= 0; {
		data[i+len(marker)-1] ^= 0x01 // every copy, the live one among them
		n++
		j := bytes.Index(data[i+1:], []byte(marker))
		if j < 0 {
			break
		}
		i += 1 + j
	}
	if n == 0 {
		t.Fatal("marker not found in the file")
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := reopen(dir); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("Open of a file with a damaged value: %v, want ErrDamaged (checksum)", err)
	}
}

// TestTornPageDetectedAtOpen: a page of live rows zeroed (a torn write
// that left nothing of it) is refused at open.
func TestTornPageDetectedAtOpen(t *testing.T) {
	dir := filled(t, 40)
	path := filepath.Join(dir, FileName)
	data, _ := os.ReadFile(path)
	f, _ := os.Open(path)
	m, _ := readMeta(f, 0)
	_ = f.Close()
	ps := int(m.pageSize)
	zeroed := 0
	for p := 2; p*ps < len(data); p++ {
		if page := data[p*ps : (p+1)*ps]; bytes.Contains(page, []byte(marker)) {
			clear(page)
			zeroed++
		}
	}
	if zeroed == 0 {
		t.Fatal("no page holds the rows")
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := reopen(dir); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Open of a file with %d zeroed pages: %v, want ErrDamaged", zeroed, err)
	}
}

// TestTornMetaPage: the newest meta page torn (its commit's last write,
// never acknowledged: bbolt fsyncs the data pages before it and the meta
// page before answering) opens at the commit before it; both meta pages
// torn is refused.
func TestTornMetaPage(t *testing.T) {
	dir := filled(t, 3)
	path := filepath.Join(dir, FileName)
	data, _ := os.ReadFile(path)
	f, _ := os.Open(path)
	m0, _ := readMeta(f, 0)
	m1, _ := readMeta(f, int64(m0.pageSize))
	_ = f.Close()
	newest := 0
	if m1.txid > m0.txid {
		newest = int(m0.pageSize)
	}
	torn := bytes.Clone(data)
	torn[newest+pageHeader+metaChecksumAt-1] ^= 0xff
	if err := os.WriteFile(path, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, Options{Clock: clock.NewFake(fileEpoch), NoControl: true})
	if err != nil {
		t.Fatalf("Open with the newest meta page torn: %v", err)
	}
	page, err := db.State(nil).List(context.Background(), store.ListQuery{TenantID: "t1"})
	_ = db.Close()
	if err != nil || len(page.Executions) != 2 {
		t.Fatalf("after the torn commit: %d rows, %v; want the 2 of the commits before it", len(page.Executions), err)
	}
	both := bytes.Clone(data)
	both[pageHeader+metaChecksumAt-1] ^= 0xff
	both[int(m0.pageSize)+pageHeader+metaChecksumAt-1] ^= 0xff
	if err := os.WriteFile(path, both, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := reopen(dir); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Open with both meta pages torn: %v, want ErrDamaged", err)
	}
}

// TestExpireDeletesOnlyIntactExpiredParts: the janitor's scan reads a
// part's expiry without its checksum; it deletes an expired part, keeps
// a live one, and keeps an expired part whose bytes were damaged (the
// deleting transaction verifies the checksum), so the damage stays
// visible as ErrDamaged rather than becoming a missing part.
func TestExpireDeletesOnlyIntactExpiredParts(t *testing.T) {
	clk := clock.NewFake(fileEpoch)
	db, err := Open(t.TempDir(), Options{Clock: clk, NoControl: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	ps := db.Payloads(nil)
	for _, p := range []payload.Part{
		{PayloadID: "p", Name: "expired", Data: []byte("gone"), ExpiresAt: fileEpoch.Add(time.Hour)},
		{PayloadID: "p", Name: "live", Data: []byte("kept"), ExpiresAt: fileEpoch.Add(72 * time.Hour)},
		{PayloadID: "p", Name: "damaged", Data: []byte("bits"), ExpiresAt: fileEpoch.Add(time.Hour)},
	} {
		if err := ps.PutPart(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.bolt.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bParts)
		v := bytes.Clone(b.Get(partKey("p", "damaged")))
		v[len(v)-1] ^= 0x01
		return b.Put(partKey("p", "damaged"), v)
	}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(48 * time.Hour)
	if n, err := db.Expire(ctx); err != nil || n != 1 {
		t.Fatalf("Expire = %d, %v; want 1 (the intact expired part)", n, err)
	}
	if _, err := ps.GetPart(ctx, "p", "live"); err != nil {
		t.Fatalf("the live part: %v", err)
	}
	if err := db.bolt.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bParts)
		if b.Get(partKey("p", "expired")) != nil {
			return errors.New("the expired part is still stored")
		}
		if _, err := decodePart(b.Get(partKey("p", "damaged"))); !errors.Is(err, ErrDamaged) {
			return fmt.Errorf("the damaged part: %v, want it kept and ErrDamaged", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
