package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// The pages and their assets are embedded: the console fetches nothing
// from elsewhere and needs no build step.
//
//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// pageNames are the page templates, each parsed with the layout.
var pageNames = []string{"list", "execution", "deadletters", "error"}

// pages returns the parsed page templates by name, parsed on the first
// page served (a process that imports the console but serves no page,
// or none yet, pays nothing for them at startup).
var pages = sync.OnceValue(func() map[string]*template.Template {
	m := map[string]*template.Template{}
	for _, name := range pageNames {
		m[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	return m
})

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

// funcs are the template functions.
var funcs = template.FuncMap{
	"utc":     fmtTime,
	"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"dur":     fmtDuration,
	"offset":  func(d time.Duration) string { return "+" + fmtDuration(d) },
	"lower":   func(s store.Status) string { return strings.ToLower(strings.ReplaceAll(string(s), "_", "-")) },
	"asset":   func(name string) string { return Prefix + "/assets/" + name + "?v=" + assetVersion() },
	"prefix":  func() string { return Prefix },
	"add":     func(a, b int) int { return a + b },
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
