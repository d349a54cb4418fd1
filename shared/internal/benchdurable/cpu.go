package benchdurable

import (
	"bufio"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's CPU
// times: 100 on every architecture Go runs Linux on.
const clockTicks = 100

// CPUTime is the CPU time (user and system) process pid has used, from
// /proc/<pid>/stat; an error where there is no /proc.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a
// /proc/<pid>/stat line; the command name (field 2, in parentheses) may
// hold spaces.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("benchdurable: /proc stat line without a command name")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, errors.New("benchdurable: short /proc stat line")
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("benchdurable: /proc stat CPU field %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// ListenerPID finds the process listening on the loopback TCP port of
// base (a URL such as http://127.0.0.1:8000): the socket in
// /proc/net/tcp{,6} in state LISTEN, then the process holding it in
// /proc/*/fd. It is how the benchmark finds DynamoDB Local and the SQS
// server, which the test did not start, to read their CPU time.
func ListenerPID(base string) (int, error) {
	u, err := url.Parse(base)
	if err != nil {
		return 0, err
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return 0, fmt.Errorf("benchdurable: %s has no port", base)
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if err := listeningInodes(f, port, inodes); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("benchdurable: nothing listens on port %d", port)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name()))
			if err != nil {
				continue
			}
			if inode, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("benchdurable: no process found holding the listener on port %d", port)
}

// listeningInodes adds to inodes the socket inodes of the listeners on
// port in a /proc/net/tcp file.
func listeningInodes(file string, port int, inodes map[string]bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(fs) < 10 || fs[3] != "0A" { // 0A: LISTEN
			continue
		}
		_, hexPort, ok := strings.Cut(fs[1], ":")
		if p, err := strconv.ParseInt(hexPort, 16, 32); ok && err == nil && int(p) == port {
			inodes[fs[9]] = true
		}
	}
	return sc.Err()
}

// cpuWatch reads the CPU time of a set of processes at a phase's start
// and end.
type cpuWatch struct {
	names []string // one label per pid; a label may repeat (summed)
	pids  []int
	start []time.Duration
}

// add watches pid under label.
func (w *cpuWatch) add(label string, pid int) {
	w.names, w.pids = append(w.names, label), append(w.pids, pid)
}

// mark reads every process's CPU time now (a process that cannot be read
// counts 0).
func (w *cpuWatch) mark() {
	w.start = w.read()
}

// read reads each process once (a pid listed twice gets one reading).
func (w *cpuWatch) read() []time.Duration {
	seen := map[int]time.Duration{}
	out := make([]time.Duration, len(w.pids))
	for i, pid := range w.pids {
		d, ok := seen[pid]
		if !ok {
			d, _ = CPUTime(pid)
			seen[pid] = d
		}
		out[i] = d
	}
	return out
}

// since is the CPU time each label used since mark.
func (w *cpuWatch) since() map[string]time.Duration {
	if w.start == nil {
		return nil
	}
	now := w.read()
	out := map[string]time.Duration{}
	for i, name := range w.names {
		if now[i] >= w.start[i] {
			out[name] += now[i] - w.start[i]
		}
	}
	return out
}
