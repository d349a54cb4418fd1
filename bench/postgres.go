package main

// Finding a Postgres for River: BENCH_POSTGRES_URL when set, otherwise a
// throwaway cluster started from the machine's initdb/pg_ctl in a temp
// dir, listening on a unix socket only (no TCP port), run as the
// "postgres" user when the benchmark runs as root (Postgres refuses root),
// and stopped by the cleanup on every path.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// skipNoPostgres is the row of River-on-Postgres when none can be had.
const skipNoPostgres = "skipped: no Postgres (apt-get install postgresql)"

// preparePostgres implements Spec.Prepare for River on Postgres.
func preparePostgres(ctx context.Context, logf func(string, ...any)) ([]string, func(), string, error) {
	if url := os.Getenv(envPostgresURL); url != "" {
		return []string{envPostgresURL + "=" + url}, func() {}, "", nil
	}
	bin := findPostgresBin()
	if bin == "" {
		return nil, func() {}, skipNoPostgres, nil
	}
	c, err := startCluster(ctx, bin, logf)
	if err != nil {
		return nil, func() {}, "", err
	}
	env := []string{envPostgresURL + "=" + c.url(), envPostgresPID + "=" + strconv.Itoa(c.pid)}
	return env, c.stop, "", nil
}

// findPostgresBin returns the directory holding initdb, pg_ctl and
// postgres: from PATH, else the newest /usr/lib/postgresql/*/bin.
func findPostgresBin() string {
	has := func(dir string) bool {
		for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real)
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d
		}
	}
	return ""
}

// pgMajor is the version number in /usr/lib/postgresql/<n>/bin.
func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// cluster is a throwaway Postgres cluster.
type cluster struct {
	bin, dir, data string
	// asUser runs the cluster's commands as this user (when we are root).
	asUser string
	pid    int
	logf   func(string, ...any)
}

func (c *cluster) url() string {
	return "postgres://postgres@/postgres?host=" + c.dir + "&sslmode=disable"
}

// command builds a Postgres command, as c.asUser when set.
func (c *cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, name)
	if c.asUser != "" {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", c.asUser, "--", path}, args...)...)
	}
	return exec.CommandContext(ctx, path, args...)
}

func (c *cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := c.command(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(lastLines(out.String(), 5)))
	}
	return nil
}

// startCluster runs initdb and pg_ctl start in a new temp dir. On error
// everything it made is removed.
func startCluster(ctx context.Context, bin string, logf func(string, ...any)) (c *cluster, err error) {
	dir, err := os.MkdirTemp("", "qasync-bench-pg-")
	if err != nil {
		return nil, err
	}
	c = &cluster{bin: bin, dir: dir, data: filepath.Join(dir, "data"), logf: logf}
	defer func() {
		if err != nil {
			c.stop()
			c = nil
		}
	}()
	if os.Geteuid() == 0 {
		u, lerr := user.Lookup("postgres")
		if lerr != nil {
			return c, fmt.Errorf("running as root and no postgres user to run the cluster as: %w", lerr)
		}
		if _, lerr := exec.LookPath("runuser"); lerr != nil {
			return c, fmt.Errorf("running as root and no runuser to run the cluster as postgres: %w", lerr)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return c, err
		}
		c.asUser = "postgres"
	}
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.run(tctx, "initdb", "-D", c.data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"); err != nil {
		return c, err
	}
	conf := fmt.Sprintf("\n# qasync peer benchmark\nlisten_addresses = ''\nunix_socket_directories = '%s'\n"+
		"fsync = on\nsynchronous_commit = on\nmax_connections = 200\n", c.dir)
	f, err := os.OpenFile(filepath.Join(c.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return c, err
	}
	_, werr := f.WriteString(conf)
	if err := errors.Join(werr, f.Close()); err != nil {
		return c, err
	}
	if err := c.run(tctx, "pg_ctl", "-D", c.data, "-l", filepath.Join(c.dir, "postgres.log"), "-w", "-t", "60", "start"); err != nil {
		return c, err
	}
	pidFile, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return c, err
	}
	c.pid, err = strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0]))
	if err != nil {
		return c, fmt.Errorf("postmaster.pid: %w", err)
	}
	logf("postgres: throwaway cluster from %s in %s (unix socket only), postmaster pid %d", bin, c.dir, c.pid)
	return c, nil
}

// stop stops the cluster (fast, then immediate, then SIGKILL of the
// postmaster) and removes its directory.
func (c *cluster) stop() {
	if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.run(ctx, "pg_ctl", "-D", c.data, "-m", "fast", "-w", "-t", "30", "stop"); err != nil {
			c.logf("postgres: fast stop failed: %v", err)
			if err := c.run(ctx, "pg_ctl", "-D", c.data, "-m", "immediate", "-w", "-t", "15", "stop"); err != nil {
				c.logf("postgres: immediate stop failed: %v", err)
				if c.pid > 0 {
					if p, err := os.FindProcess(c.pid); err == nil {
						_ = p.Kill()
					}
				}
			}
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		c.logf("postgres: removing %s: %v", c.dir, err)
	}
}

// processTreeCPU is the CPU time (user+sys) of process pid and of its live
// children, plus what its exited children used (cutime+cstime): a Postgres
// server's total when pid is the postmaster.
func processTreeCPU(pid int) (time.Duration, error) {
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	root, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	total := root.utime + root.stime + root.cutime + root.cstime
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		if st, err := procStat(child); err == nil && st.ppid == pid {
			total += st.utime + st.stime
		}
	}
	return time.Duration(total) * tick, nil
}

type stat struct {
	ppid                         int
	utime, stime, cutime, cstime int64
}

// procStat reads the fields of /proc/<pid>/stat that processTreeCPU needs.
func procStat(pid int) (stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, err
	}
	// The command name, in parentheses, may hold spaces: fields start
	// after the last ')'. Then: state(3) ppid(4) ... utime(14) stime(15)
	// cutime(16) cstime(17).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return stat{}, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	num := func(k int) int64 { n, _ := strconv.ParseInt(f[k], 10, 64); return n }
	return stat{ppid: int(num(1)), utime: num(11), stime: num(12), cutime: num(13), cstime: num(14)}, nil
}
