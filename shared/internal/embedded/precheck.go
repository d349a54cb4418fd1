package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
)

// bbolt's on-disk meta page, read here before bbolt maps the file: bbolt
// trusts the meta page's high-water mark and would fault (SIGBUS) on the
// first page past the end of a truncated file instead of returning an
// error. The layout is bbolt's file format version 2 (stable since 2014):
// a 16-byte page header, then magic, version, page size, flags (4 bytes
// each), the root bucket (root page id and sequence, 8 each), the
// freelist page id, the high-water mark page id, the transaction id, and
// an FNV-64a checksum of everything before it.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	pageHeader     = 16
	metaChecksumAt = 4 + 4 + 4 + 4 + 16 + 8 + 8 + 8 // 56 bytes of meta before the checksum
	metaSize       = metaChecksumAt + 8
)

type boltMeta struct {
	pageSize uint32
	hwm      uint64 // pages in use (the high-water mark)
	txid     uint64
}

// readMeta decodes the meta page at off, or reports why it is invalid.
func readMeta(f *os.File, off int64) (boltMeta, error) {
	buf := make([]byte, pageHeader+metaSize)
	if _, err := f.ReadAt(buf, off); err != nil {
		return boltMeta{}, fmt.Errorf("read meta page at %d: %w", off, err)
	}
	m := buf[pageHeader:]
	le := binary.LittleEndian
	if le.Uint32(m[0:]) != boltMagic {
		return boltMeta{}, errors.New("bad magic")
	}
	if le.Uint32(m[4:]) != boltVersion {
		return boltMeta{}, fmt.Errorf("bbolt format version %d", le.Uint32(m[4:]))
	}
	h := fnv.New64a()
	_, _ = h.Write(m[:metaChecksumAt])
	if le.Uint64(m[metaChecksumAt:]) != h.Sum64() {
		return boltMeta{}, errors.New("checksum mismatch")
	}
	return boltMeta{pageSize: le.Uint32(m[8:]), hwm: le.Uint64(m[40:]), txid: le.Uint64(m[48:])}, nil
}

// precheck refuses a file shorter than its newest valid meta page says it
// is (a truncated copy, a disk that filled up): ErrDamaged. A missing or
// empty file passes (Open creates it); so does a file whose two meta pages
// are both invalid, which bbolt itself refuses.
func precheck(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("embedded: open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("embedded: stat %s: %w", path, err)
	}
	size := fi.Size()
	if size == 0 {
		return nil
	}
	if size < 2*pageHeader+metaSize {
		return fmt.Errorf("%w: %s is truncated (%d bytes)", ErrDamaged, path, size)
	}
	m0, err0 := readMeta(f, 0)
	var metas []boltMeta
	if err0 == nil {
		metas = append(metas, m0)
		if m1, err1 := readMeta(f, int64(m0.pageSize)); err1 == nil {
			metas = append(metas, m1)
		}
	} else {
		// Meta 0 is torn: find meta 1 at the usual page sizes.
		for _, ps := range []int64{4096, 8192, 16384, 65536} {
			if m1, err1 := readMeta(f, ps); err1 == nil && int64(m1.pageSize) == ps {
				metas = append(metas, m1)
				break
			}
		}
	}
	if len(metas) == 0 {
		return nil // bbolt reports it (ErrInvalid / ErrChecksum)
	}
	newest := metas[0]
	for _, m := range metas[1:] {
		if m.txid > newest.txid {
			newest = m
		}
	}
	if need := int64(newest.hwm) * int64(newest.pageSize); size < need {
		return fmt.Errorf("%w: %s is truncated: %d bytes, its meta page (transaction %d) needs %d", ErrDamaged, path, size, newest.txid, need)
	}
	return nil
}
