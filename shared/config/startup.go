package config

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/qasync/qasync/shared/internal/suggest"
)

// MinAdminTokenLength is the shortest operator token (admin.token, in
// characters) that strict startup accepts; a shorter one starts with a
// config_weak_admin_token warning otherwise. 32 characters are 128 bits
// as hex (openssl rand -hex 16), the strength of a random AES-128 key:
// beyond any online guessing of the operator routes. The check is on the
// length alone: it cannot tell how random the characters are, so a long
// token typed by hand passes it.
const MinAdminTokenLength = 32

// Warning is a configuration problem that does not stop startup (strict
// startup refuses some of them instead; see Check). The process logs each
// at WARN as its Event (Log).
type Warning struct {
	// Event is the log event: config_unknown_env or config_weak_admin_token.
	Event string
	// Key is the full key concerned, if any.
	Key string
	// Variable is the environment variable concerned, if any.
	Variable string
	// Nearest is, for an unknown variable, the known variable closest to
	// it by edit distance (the likely intended one).
	Nearest string
	// Message says what is wrong and what to do, for humans.
	Message string
}

// Log writes w to log at WARN with "event" and snake_case attributes.
// Neither the message nor the attributes hold a secret's value.
func (w Warning) Log(ctx context.Context, log *slog.Logger) {
	attrs := []slog.Attr{slog.String("event", w.Event)}
	if w.Key != "" {
		attrs = append(attrs, slog.String("key", w.Key))
	}
	if w.Variable != "" {
		attrs = append(attrs, slog.String("variable", w.Variable))
	}
	if w.Nearest != "" {
		attrs = append(attrs, slog.String("nearest", w.Nearest))
	}
	attrs = append(attrs, slog.String("message", w.Message))
	log.LogAttrs(ctx, slog.LevelWarn, w.Event, attrs...)
}

// envPrefixes are the environment variable prefixes of the keys:
// EnvName(KeyPrefix) and EnvName(ItemRejectPrefix).
var envPrefixes = []string{EnvName(KeyPrefix), EnvName(ItemRejectPrefix)}

// Check judges what Load cannot see: environ (os.Environ(), "NAME=value"
// entries) for variables under the keys' prefixes (PIPELINE_ORCHESTRATOR_,
// PIPELINE_ITEM_REJECT_) that name no key, nor one of known (variables of
// the same prefixes read elsewhere, such as the test-only keys), and c's
// operator token for its length. Each finding is a Warning: an unknown
// variable (config_unknown_env, with the nearest known variable: most
// likely a typo whose value is silently not used) and an admin token
// shorter than MinAdminTokenLength (config_weak_admin_token). Under strict
// startup an unknown variable is an error instead, naming each with its
// nearest: strict startup is the production posture, where a misspelt key
// would leave its setting at the default unseen (a variable that an older
// or newer qasync knew must then be removed). The short token's error
// under strict startup is Validate's (Load's).
func (c Config) Check(environ []string, known ...string) ([]Warning, error) {
	names := make([]string, 0, len(entries)+len(known))
	for i := range entries {
		names = append(names, EnvName(FullKey(entries[i].key)))
	}
	names = append(names, known...)
	var warns []Warning
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(envPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) || slices.Contains(names, name) {
			continue
		}
		near := nearest(name, names, max(1, len(strings.TrimPrefix(strings.TrimPrefix(name, envPrefixes[0]), envPrefixes[1]))/3))
		msg := fmt.Sprintf("%s names no configuration key: its value is not used", name)
		if near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		warns = append(warns, Warning{Event: "config_unknown_env", Variable: name, Nearest: near, Message: msg})
		unknown = append(unknown, msg)
	}
	if c.AdminToken != "" && utf8.RuneCountInString(c.AdminToken) < MinAdminTokenLength {
		key := FullKey("admin.token")
		warns = append(warns, Warning{Event: "config_weak_admin_token", Key: key, Variable: EnvName(key),
			Message: weakTokenMessage(key) + "; strict startup refuses it"})
	}
	if c.StrictStartup && len(unknown) > 0 {
		return warns, fmt.Errorf("config: %s=true refuses unknown variables: %s", FullKey("strict-startup"), strings.Join(unknown, "; "))
	}
	return warns, nil
}

// weakTokenMessage says that key's token is too short, without its value.
func weakTokenMessage(key string) string {
	return fmt.Sprintf("%s is shorter than %d characters, which someone could guess: use a random one (openssl rand -hex 16 prints 32 characters, 128 bits)",
		key, MinAdminTokenLength)
}

// checkAdminToken is admin.token's check: strict startup refuses a token
// shorter than MinAdminTokenLength (Check warns of it otherwise).
func checkAdminToken(c Config, v string) error {
	if c.StrictStartup && v != "" && utf8.RuneCountInString(v) < MinAdminTokenLength {
		return fmt.Errorf("shorter than %d characters, which strict startup (%s) refuses: use a random token (openssl rand -hex 16 prints 32 characters, 128 bits)",
			MinAdminTokenLength, FullKey("strict-startup"))
	}
	return nil
}

// CheckListener judges http.addr with the tenant source for a process
// that listens on it (qasync serve): tenant source header takes the
// tenant from the X-Tenant-Id header, which any caller can send, so on an
// address beyond loopback (0.0.0.0, ::, an empty host, a non-loopback IP
// or any host name but localhost; host names are not resolved) every
// caller who can reach the port can act as any tenant. That needs
// http.allow-header-tenant=true said explicitly, or another tenant source
// (none, iam, iam-account, jwt). A loopback address passes: only this
// machine's users reach it.
func (c Config) CheckListener() error {
	if c.TenantSource != "header" || c.AllowHeaderTenant || LoopbackAddr(c.HTTPAddr) {
		return nil
	}
	return fmt.Errorf("config: %s %q is beyond loopback, and %s=header (the default) lets any caller who reaches it pick its tenant with the X-Tenant-Id header: "+
		"set %s to none, iam, iam-account or jwt, or %s=true to accept that (a trusted network, development), or listen on 127.0.0.1",
		FullKey("http.addr"), c.HTTPAddr, FullKey("http.tenant-source"), FullKey("http.tenant-source"), FullKey("http.allow-header-tenant"))
}

// LoopbackAddr reports whether the host of addr (host:port) is a loopback
// address (127.0.0.0/8, ::1) or localhost. An empty host, an unspecified
// address (0.0.0.0, ::), any other IP and any other host name are not:
// host names are not resolved, since a name's addresses can change after
// the check.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Nearest returns the candidate closest to name by edit distance
// (suggest.Distance, case-insensitive), or "" when none is within a third of
// name's length (at least 1): a suggestion for a misspelt flag or
// variable, not a guess at something unrelated. Ties go to the first
// candidate.
func Nearest(name string, candidates []string) string {
	return nearest(name, candidates, max(1, len(name)/3))
}

// nearest is Nearest with the largest distance allowed (for a variable,
// a third of the part after its prefix, which all candidates share).
func nearest(name string, candidates []string, maxDist int) string {
	best, bestDist := "", maxDist+1
	for _, c := range candidates {
		if d := suggest.Distance(strings.ToLower(name), strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// FlagNames lists every flag Load accepts (the keys' short names and
// their aliases), without "--".
func FlagNames() []string {
	names := make([]string, 0, len(entries)+len(flagAliases))
	for i := range entries {
		names = append(names, entries[i].key)
	}
	for alias := range flagAliases {
		names = append(names, alias)
	}
	slices.Sort(names)
	return names
}

// unknownFlagError turns the flag package's error for an undefined flag
// into one that suggests the nearest flag; other errors pass.
func unknownFlagError(err error) error {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return fmt.Errorf("config: %w", err)
	}
	msg := fmt.Sprintf("config: unknown flag --%s", name)
	if near := Nearest(name, FlagNames()); near != "" {
		msg += fmt.Sprintf(" (did you mean --%s?)", near)
	}
	return fmt.Errorf("%s; every key and its flag: qasync keys, docs/configuration.md", msg)
}
