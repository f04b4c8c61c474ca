package cli

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func (a *app) newFilesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "files",
		Aliases: []string{"file", "fs"},
		Short:   "Copy files into and out of a sandbox, list directories",
		RunE:    groupRun,
	}
	cmd.AddCommand(a.newPutCmd(), a.newGetFileCmd(), a.newLsCmd())
	return cmd
}

func (a *app) newPutCmd() *cobra.Command {
	var mode string
	cmd := &cobra.Command{
		Use:   "put ID LOCAL REMOTE",
		Short: "Upload a local file (- for stdin) to REMOTE in a sandbox",
		Args:  argsUsage(cobra.ExactArgs(3)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, local, remote := args[0], args[1], args[2]
			up := hybox.Upload{Path: remote}
			if mode != "" {
				m, err := strconv.ParseUint(mode, 8, 32)
				if err != nil || m > 0o7777 {
					return usagef(cmd, "--mode %q: want octal digits such as 644", mode)
				}
				up.Mode = fromOctal(m)
			}
			if local == "-" {
				up.Content = a.env.Stdin
			} else {
				f, err := os.Open(local)
				if err != nil {
					return err
				}
				defer f.Close()
				fi, err := f.Stat()
				if err != nil {
					return err
				}
				if fi.IsDir() {
					return usagef(cmd, "%s is a directory", local)
				}
				if up.Mode == 0 {
					up.Mode = fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
				}
				up.Content = f
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			return c.Sandbox(id).Upload(cmd.Context(), up)
		},
	}
	cmd.Flags().StringVar(&mode, "mode", "", "file mode in octal (default: the local file's)")
	return cmd
}

// fromOctal turns permission bits such as 0o4755 into an fs.FileMode.
func fromOctal(m uint64) fs.FileMode {
	mode, _ := api.Mode(api.ModeOf(fs.FileMode(m&0o777)) + api.Mode(m>>9&7*1000)).FileMode()
	return mode
}

// fromOctalDigits reads a mode in the wire form, octal digits written as
// a decimal number (755 is 0o755).
func fromOctalDigits(n int) fs.FileMode {
	m, err := api.Mode(n).FileMode()
	if err != nil {
		return 0
	}
	return m & fs.ModePerm
}

func (a *app) newGetFileCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID REMOTE [LOCAL|-]",
		Short: "Download REMOTE from a sandbox to LOCAL (default: its base name here; - for stdout)",
		Args:  argsUsage(cobra.RangeArgs(2, 3)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, remote := args[0], args[1]
			local := path.Base(remote)
			if len(args) == 3 {
				local = args[2]
			}
			if local == "/" || local == "." || local == ".." {
				return usagef(cmd, "cannot name a local file after %q: give LOCAL", remote)
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			rc, err := c.Sandbox(id).Open(cmd.Context(), remote)
			if err != nil {
				return err
			}
			defer rc.Close()
			if local == "-" {
				_, err := io.Copy(a.env.Stdout, rc)
				return err
			}
			if fi, err := os.Stat(local); err == nil && fi.IsDir() {
				local = filepath.Join(local, path.Base(remote))
			}
			return writeFileAtomic(local, rc)
		},
	}
}

// writeFileAtomic writes r to a temporary file beside name and renames it,
// so that a failed download leaves no partial file.
func writeFileAtomic(name string, r io.Reader) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".hybox-*")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := io.Copy(f, r); err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), name); err != nil {
		return err
	}
	ok = true
	return nil
}

func (a *app) newLsCmd() *cobra.Command {
	var depth int
	cmd := &cobra.Command{
		Use:   "ls ID [PATH]",
		Short: "List a directory of a sandbox (default /)",
		Args:  argsUsage(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := a.json(cmd)
			if err != nil {
				return err
			}
			dir := "/"
			if len(args) == 2 {
				dir = args[1]
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			list, err := c.Sandbox(args[0]).ListDir(cmd.Context(), dir, depth)
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []api.FileInfo{}
				}
				return writeValue(a.env.Stdout, list)
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MODE\tSIZE\tMODIFIED\tPATH")
			for _, fi := range list {
				name := fi.Path
				if fi.Type == api.FileInfoTypeDirectory {
					name += "/"
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", modeString(fi), fi.Size, formatTime(fi.ModifiedAt), name)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&depth, "depth", 1, "levels to list")
	return cmd
}

// modeString renders a FileInfo's type and mode like ls -l does.
func modeString(fi api.FileInfo) string {
	m := fromOctalDigits(fi.Mode)
	switch fi.Type {
	case api.FileInfoTypeDirectory:
		m |= fs.ModeDir
	case api.FileInfoTypeSymlink:
		m |= fs.ModeSymlink
	case api.FileInfoTypeOther:
		m |= fs.ModeIrregular
	}
	return m.String()
}
