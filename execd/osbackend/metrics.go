package osbackend

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hybox-dev/hybox/execd"
)

// cpuSampleGap is the shortest interval over which CPU use is measured.
const cpuSampleGap = 100 * time.Millisecond

// metricsState keeps the previous CPU sample, so that a Metrics call
// measures CPU use since the last one (or over cpuSampleGap).
type metricsState struct {
	mu       sync.Mutex
	lastAt   time.Time
	lastUsed time.Duration // CPU time used, all CPUs together
	lastOK   bool
}

// Metrics implements execd.Executor: memory and CPU of the sandbox's cgroup
// (v2, else v1), else of the whole machine (/proc/meminfo, /proc/stat).
//
// # Errors
// When no source can be read, or ctx ends while sampling.
func (b *Executor) Metrics(ctx context.Context) (execd.Metrics, error) {
	cpus := b.cpuCount()
	used, total, err := b.memory()
	if err != nil {
		return execd.Metrics{}, fmt.Errorf("osbackend: memory metrics: %w", err)
	}
	pct, err := b.cpuPercent(ctx, cpus)
	if err != nil {
		return execd.Metrics{}, err
	}
	const mib = 1 << 20
	return execd.Metrics{
		CPUCount:    cpus,
		CPUUsedPct:  math.Round(pct*100) / 100,
		MemTotalMiB: math.Round(float64(total)/mib*100) / 100,
		MemUsedMiB:  math.Round(float64(used)/mib*100) / 100,
		Timestamp:   time.Now().UnixMilli(),
	}, nil
}

// readInt reads a file holding one integer ("max" reads as -1).
func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// cpuCount is the cgroup's CPU quota in CPUs, else the number of CPUs.
func (b *Executor) cpuCount() float64 {
	n := float64(runtime.NumCPU())
	if data, err := os.ReadFile(filepath.Join(b.opts.CgroupDir, "cpu.max")); err == nil {
		f := strings.Fields(string(data))
		if len(f) == 2 && f[0] != "max" {
			q, err1 := strconv.ParseFloat(f[0], 64)
			p, err2 := strconv.ParseFloat(f[1], 64)
			if err1 == nil && err2 == nil && p > 0 && q > 0 {
				return math.Min(n, q/p)
			}
		}
		return n
	}
	q, err1 := readInt(filepath.Join(b.opts.CgroupDir, "cpu", "cpu.cfs_quota_us"))
	p, err2 := readInt(filepath.Join(b.opts.CgroupDir, "cpu", "cpu.cfs_period_us"))
	if err1 == nil && err2 == nil && q > 0 && p > 0 {
		return math.Min(n, float64(q)/float64(p))
	}
	return n
}

// memory returns used and total bytes.
func (b *Executor) memory() (used, total int64, err error) {
	memTotal, memAvail, merr := b.meminfo()
	// cgroup v2
	if cur, err := readInt(filepath.Join(b.opts.CgroupDir, "memory.current")); err == nil {
		limit, _ := readInt(filepath.Join(b.opts.CgroupDir, "memory.max"))
		if limit <= 0 || (merr == nil && limit > memTotal) {
			limit = memTotal
		}
		return cur, limit, nil
	}
	// cgroup v1
	if cur, err := readInt(filepath.Join(b.opts.CgroupDir, "memory", "memory.usage_in_bytes")); err == nil {
		limit, _ := readInt(filepath.Join(b.opts.CgroupDir, "memory", "memory.limit_in_bytes"))
		if limit <= 0 || (merr == nil && limit > memTotal) {
			limit = memTotal
		}
		return cur, limit, nil
	}
	if merr != nil {
		return 0, 0, merr
	}
	return memTotal - memAvail, memTotal, nil
}

// meminfo reads MemTotal and MemAvailable in bytes.
func (b *Executor) meminfo() (total, avail int64, err error) {
	data, err := os.ReadFile(filepath.Join(b.opts.ProcDir, "meminfo"))
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "MemTotal:":
			total = v << 10
		case "MemAvailable:":
			avail = v << 10
		}
	}
	if total == 0 {
		return 0, 0, fmt.Errorf("no MemTotal in %s/meminfo", b.opts.ProcDir)
	}
	return total, avail, nil
}

// cpuUsed returns the CPU time used so far: the cgroup's, else the
// machine's non-idle time from /proc/stat.
func (b *Executor) cpuUsed() (time.Duration, error) {
	if data, err := os.ReadFile(filepath.Join(b.opts.CgroupDir, "cpu.stat")); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "usage_usec" {
				v, err := strconv.ParseInt(f[1], 10, 64)
				if err == nil {
					return time.Duration(v) * time.Microsecond, nil
				}
			}
		}
	}
	if v, err := readInt(filepath.Join(b.opts.CgroupDir, "cpuacct", "cpuacct.usage")); err == nil {
		return time.Duration(v), nil
	}
	data, err := os.ReadFile(filepath.Join(b.opts.ProcDir, "stat"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, fmt.Errorf("unexpected %s/stat", b.opts.ProcDir)
	}
	var busy int64
	for i, s := range f[1:] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("unexpected %s/stat: %w", b.opts.ProcDir, err)
		}
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest time is already counted in user
			break
		}
		busy += v
	}
	// USER_HZ is 100 on every Linux ABI Go supports.
	return time.Duration(busy) * 10 * time.Millisecond, nil
}

// cpuPercent is the share of the available CPUs used since the previous
// sample; the first call takes two samples cpuSampleGap apart.
func (b *Executor) cpuPercent(ctx context.Context, cpus float64) (float64, error) {
	m := &b.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if !m.lastOK || now.Sub(m.lastAt) < cpuSampleGap {
		if !m.lastOK {
			u, err := b.cpuUsed()
			if err != nil {
				return 0, fmt.Errorf("osbackend: cpu metrics: %w", err)
			}
			m.lastAt, m.lastUsed, m.lastOK = now, u, true
		}
		wait := cpuSampleGap - time.Since(m.lastAt)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
	}
	u, err := b.cpuUsed()
	if err != nil {
		return 0, fmt.Errorf("osbackend: cpu metrics: %w", err)
	}
	now = time.Now()
	wall := now.Sub(m.lastAt)
	delta := u - m.lastUsed
	m.lastAt, m.lastUsed = now, u
	if wall <= 0 || cpus <= 0 || delta < 0 {
		return 0, nil
	}
	return math.Min(100, math.Max(0, float64(delta)/(float64(wall)*cpus)*100)), nil
}
