package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// The assets are embedded: the console fetches nothing from elsewhere
// and needs no build step.
//
//go:embed assets
var assetFS embed.FS

// assetVersion changes whenever an asset does: asset links carry it, so a
// browser never keeps a stale stylesheet or script.
var assetVersion = sync.OnceValue(func() string {
	h := sha256.New()
	_ = fs.WalkDir(assetFS, "assets", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := assetFS.ReadFile(p)
			h.Write([]byte(p))
			h.Write(b)
		}
		return err
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
})

// assetTypes are the content types of the embedded assets.
var assetTypes = map[string]string{".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}

// serveAsset handles GET /console/assets/{name}.
func serveAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ct := ""
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		ct = assetTypes[name[i:]]
	}
	b, err := assetFS.ReadFile("assets/" + name)
	if err != nil || ct == "" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "public, max-age=86400")
	_, _ = w.Write(b)
}

// asset is the address of an embedded asset, versioned.
func asset(name string) string { return Prefix + "/assets/" + name + "?v=" + assetVersion() }

// statusClass is a status's CSS class suffix: RUNNING is "running",
// WAIT_RETRY "wait-retry".
func statusClass(s store.Status) string {
	return strings.ToLower(strings.ReplaceAll(string(s), "_", "-"))
}

// fmtTime formats t in UTC to the millisecond ("-" for the zero time).
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// fmtDuration formats d for people: "850 ms", "4.25 s", "3m 07s",
// "2h 05m", "3d 04h".
func fmtDuration(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDuration(-d)
	}
	switch {
	case d == 0:
		return "0 ms"
	case d < time.Millisecond:
		return "<1 ms"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d/time.Millisecond)
	case d < 10*time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", d/time.Minute, d%time.Minute/time.Second)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh %02dm", d/time.Hour, d%time.Hour/time.Minute)
	}
	return fmt.Sprintf("%dd %02dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
}
