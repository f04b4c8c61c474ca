package osbackend

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hybox-dev/hybox/execd"
)

// A warm shell is a bash started ahead of time (Options.WarmShell) that
// waits for one command on fd 3. Claiming it saves the fork+exec of the
// shell on the request path, which is what a command costs most under
// gVisor. The stub reads a header (the setup's length), the setup (cd,
// exports, stderr redirection: ASCII only, generated here) and the
// command (to EOF), then evals the command as the only statement of
// line 1, so that exit, $?, traps, $LINENO, $0, $@, $_ and
// BASH_EXECUTION_STRING behave as with bash -c CMD.
//
// read -N on a pipe reads in blocks (bash 5.1 and later); the header is a
// few bytes read one at a time.
const warmStub = `__hyboxw_u=$_; IFS= read -r __hyboxw_n <&3; ` +
	`IFS= read -r -N "$__hyboxw_n" __hyboxw_s <&3; IFS= read -r -N 2147483647 __hyboxw_c <&3; exec 3<&-; ` +
	`eval "$__hyboxw_s"; BASH_EXECUTION_STRING=$__hyboxw_c; printf -v __hyboxw_u %q "$__hyboxw_u"; ` +
	`eval "unset __hyboxw_c __hyboxw_n __hyboxw_s __hyboxw_u; : $__hyboxw_u; $__hyboxw_c"`

// warmPrefix names the stub's variables; environments holding such a
// variable use the cold path.
const warmPrefix = "__hyboxw_"

// warmShell is an idle pre-started shell.
type warmShell struct {
	pid        int
	exitc      <-chan syscall.WaitStatus
	cmdW       *os.File // the stub's fd 3
	outR, errR *os.File
	env        *[]string // the base environment it started with
}

// Close kills an idle warm shell (when the backend closes).
func (w *warmShell) Close() error {
	_ = syscall.Kill(-w.pid, syscall.SIGKILL)
	w.cmdW.Close()
	w.outR.Close()
	w.errR.Close()
	return nil
}

// dead reports whether the shell exited while idle (its status is then
// consumed).
func (w *warmShell) dead() bool {
	select {
	case <-w.exitc:
		return true
	default:
		return false
	}
}

// warmCapable reports whether the configuration allows warm shells: the
// shell is bash and the base environment has no variable of the stub.
func warmCapable(shell string, env []string) bool {
	if filepath.Base(shell) != "bash" {
		return false
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, warmPrefix) || strings.ContainsRune(kv, 0) {
			return false
		}
	}
	return true
}

// warmIdle is how long no command must start before the next warm shell
// is: starting one costs what a cold command does (an exec, the dearest
// thing under gVisor), so during a burst of back-to-back commands it would
// only compete with them.
const warmIdle = 20 * time.Millisecond

// scheduleWarm (re)arms the start of the next warm shell for warmIdle from
// now. Every command calls it.
func (b *Executor) scheduleWarm() {
	if !b.warmOK.Load() {
		return
	}
	b.warmMu.Lock()
	defer b.warmMu.Unlock()
	if b.warmTimer == nil {
		b.warmTimer = time.AfterFunc(warmIdle, b.refillWarm)
		return
	}
	b.warmTimer.Reset(warmIdle)
}

// refillWarm starts a warm shell in the background unless one is idle or
// starting, or the backend is closed.
func (b *Executor) refillWarm() {
	if !b.warmOK.Load() {
		return
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return
	}
	b.warmMu.Lock()
	if b.warm != nil || b.warmStarting {
		b.warmMu.Unlock()
		return
	}
	b.warmStarting = true
	b.warmMu.Unlock()
	go func() {
		w, err := b.startWarm()
		b.warmMu.Lock()
		defer b.warmMu.Unlock()
		b.warmStarting = false
		if err != nil {
			b.opts.Logger.Debug("osbackend: warm shell", "err", err)
			return
		}
		if b.track(w) != nil { // closed meanwhile
			_ = w.Close()
			return
		}
		b.warm = w
	}()
}

// startWarm starts a warm shell in Workdir with the base environment.
func (b *Executor) startWarm() (w *warmShell, err error) {
	var files []*os.File
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
		}
	}()
	pipe := func() (r, w *os.File) {
		if err != nil {
			return nil, nil
		}
		if r, w, err = os.Pipe(); err == nil {
			files = append(files, r, w)
		}
		return r, w
	}
	cmdR, cmdW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	cmd := exec.Command(b.opts.Shell, "--noprofile", "--norc", "-c", warmStub)
	cmd.Dir = b.opts.Workdir
	env := b.env.Load()
	cmd.Env = environ(*env, nil)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = []*os.File{cmdR}
	pid, exitc, err := b.spawn(cmd, cmd.Start)
	if err != nil {
		return nil, err
	}
	cmdR.Close()
	outW.Close()
	errW.Close()
	return &warmShell{pid: pid, exitc: exitc, cmdW: cmdW, outR: outR, errR: errR, env: env}, nil
}

// claimWarm takes the idle warm shell; nil when there is none (one still
// starting is not waited for: under back-to-back commands a cold start is
// as fast). The caller schedules the next one.
func (b *Executor) claimWarm() *warmShell {
	b.warmMu.Lock()
	w := b.warm
	b.warm = nil
	b.warmMu.Unlock()
	if w != nil {
		b.untrack(w)
	}
	if w != nil && w.dead() {
		_ = w.Close()
		return nil
	}
	return w
}

// putBackWarm makes w, claimed but not used, the idle warm shell again.
func (b *Executor) putBackWarm(w *warmShell) {
	b.warmMu.Lock()
	defer b.warmMu.Unlock()
	if b.warm != nil || b.track(w) != nil {
		_ = w.Close()
		return
	}
	b.warm = w
}

// envSince returns the variables of the base environment cur that the
// warm shell's environment was lacks or has with another value; ok is
// false when cur lacks one of was (only a cold start can drop it).
func envSince(was, cur []string) (map[string]string, bool) {
	old := make(map[string]string, len(was))
	for _, kv := range was {
		k, v, _ := strings.Cut(kv, "=")
		old[k] = v
	}
	diff := map[string]string{}
	seen := make(map[string]bool, len(cur))
	for _, kv := range cur {
		k, v, _ := strings.Cut(kv, "=")
		seen[k] = true
		if ov, ok := old[k]; !ok || ov != v {
			diff[k] = v
		}
	}
	for k := range old {
		if !seen[k] {
			return nil, false
		}
	}
	return diff, true
}

// warmSetup returns the setup statements of spec on a warm shell started
// in start, or ok false when the command must take the cold path (a
// variable the shell treats specially at startup, or a NUL byte that the
// cold path rejects).
func warmSetup(spec execd.ProcessSpec, dir, start string, shared bool, envPWD string) (string, bool) {
	if strings.ContainsRune(spec.Command, 0) {
		return "", false
	}
	var sb strings.Builder
	if shared {
		// One pipe for both, like the cold path: their order is kept.
		sb.WriteString("exec 2>&1; ")
	}
	sb.WriteString("SECONDS=0")
	if dir != start {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", false
		}
		q := shQuote(abs)
		// cd -P gives the physical path, as bash does at startup unless the
		// inherited PWD names the same directory; OLDPWD is restored.
		cd := "cd -P -- " + q + " || exit; "
		if envPWD != "" && filepath.IsAbs(envPWD) && !strings.ContainsRune(envPWD, 0) {
			if a, err1 := os.Stat(envPWD); err1 == nil {
				if d, err2 := os.Stat(abs); err2 == nil && os.SameFile(a, d) {
					cd += "PWD=" + shQuote(envPWD) + "; "
				}
			}
		}
		sb.WriteString(`; if [ "${OLDPWD+x}" ]; then ` + warmPrefix + "o=$OLDPWD; " + cd +
			"OLDPWD=$" + warmPrefix + "o; unset " + warmPrefix + "o; else " + cd +
			"unset OLDPWD; declare -x OLDPWD; fi")
	}
	for _, k := range sortedKeys(spec.Env) {
		v := spec.Env[k]
		if !plainVar(k) || strings.ContainsRune(v, 0) {
			return "", false
		}
		sb.WriteString("; export " + k + "=" + shQuote(v))
	}
	return sb.String(), true
}

// plainVar reports whether an environment variable name is a shell
// identifier that bash does not interpret when it starts (exporting it in
// the running shell then equals passing it in the environment).
func plainVar(k string) bool {
	if k == "" || strings.HasPrefix(k, warmPrefix) || strings.HasPrefix(k, "BASH") {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	switch k {
	case "_", "ENV", "SHELLOPTS", "POSIXLY_CORRECT", "SHLVL", "PWD", "OLDPWD", "IFS", "UID", "EUID",
		"PPID", "GROUPS", "HOSTNAME", "HOSTTYPE", "OSTYPE", "MACHTYPE", "SHELL", "PS4", "SECONDS",
		"RANDOM", "SRANDOM", "LINENO", "FUNCNAME", "DIRSTACK", "PIPESTATUS", "HISTCMD", "OPTIND",
		"OPTERR", "EPOCHSECONDS", "EPOCHREALTIME", "COMP_WORDBREAKS", "INPUTRC", "TMOUT", "GLOBIGNORE":
		return false
	}
	return true
}

// shQuote quotes s for bash as $'...', with every byte outside printable
// ASCII escaped, so that the result is ASCII (the stub counts characters).
func shQuote(s string) string {
	var sb strings.Builder
	sb.WriteString("$'")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			sb.WriteByte(c)
		default:
			fmt.Fprintf(&sb, `\x%02x`, c)
		}
	}
	sb.WriteByte('\'')
	return sb.String()
}

// run hands the command to the claimed shell.
//
// # Errors
// When the shell died before it read the command.
func (w *warmShell) run(setup, command string) error {
	payload := strconv.Itoa(len(setup)) + "\n" + setup + command
	_, err := w.cmdW.WriteString(payload)
	if cerr := w.cmdW.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("warm shell: %w", err)
	}
	return nil
}
