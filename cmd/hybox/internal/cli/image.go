package cli

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	hybox "github.com/hybox-dev/hybox/sdks/go"
)

func (a *app) newImageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "image",
		Aliases: []string{"images"},
		Short:   "Manage the images of container sandboxes",
		RunE:    groupRun,
	}
	cmd.AddCommand(a.newImageImportCmd(), a.newImageLsCmd(), a.newImageRmCmd())
	return cmd
}

func (a *app) newImageImportCmd() *cobra.Command {
	var quiet bool
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Import an OCI or docker image archive (for example from `docker save`)",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			var r io.Reader = f
			if !quiet {
				p := newProgress(a.env.Stderr, fi.Size())
				defer p.stop()
				r = p.reader(f)
			}
			imgs, err := c.ImportImage(cmd.Context(), r)
			if err != nil {
				return err
			}
			for _, img := range imgs {
				fmt.Fprintln(a.env.Stdout, img.Name)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	return cmd
}

func (a *app) newImageLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List images",
		Args:    argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			asJSON, err := a.json(cmd)
			if err != nil {
				return err
			}
			imgs, err := c.Images(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeValue(a.env.Stdout, imgs)
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSIZE\tDIGEST")
			for _, img := range imgs {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", img.Name, humanBytes(img.Size), img.Digest)
			}
			return tw.Flush()
		},
	}
}

func (a *app) newImageRmCmd() *cobra.Command {
	return a.newRmCmd("Remove images", (*hybox.Client).RemoveImage)
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// progress draws an upload progress bar on w (a terminal's stderr).
type progress struct {
	w     io.Writer
	total int64
	done  atomic.Int64
	quit  chan struct{}
	ended chan struct{}
	start time.Time
}

func newProgress(w io.Writer, total int64) *progress {
	p := &progress{w: w, total: total, quit: make(chan struct{}), ended: make(chan struct{}), start: time.Now()}
	go p.loop()
	return p
}

func (p *progress) reader(r io.Reader) io.Reader {
	return readerFunc(func(b []byte) (int, error) {
		n, err := r.Read(b)
		p.done.Add(int64(n))
		return n, err
	})
}

func (p *progress) loop() {
	defer close(p.ended)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			p.draw()
			fmt.Fprintln(p.w)
			return
		case <-t.C:
			p.draw()
		}
	}
}

func (p *progress) draw() {
	const width = 30
	done := p.done.Load()
	frac := 1.0
	if p.total > 0 {
		frac = float64(done) / float64(p.total)
	}
	if frac > 1 {
		frac = 1
	}
	filled := int(frac * width)
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = ' '
		if i < filled {
			bar[i] = '='
		}
	}
	rate := float64(done) / time.Since(p.start).Seconds()
	fmt.Fprintf(p.w, "\r[%s] %3.0f%% %s / %s  %s/s ", bar, frac*100, humanBytes(done), humanBytes(p.total), humanBytes(int64(rate)))
}

func (p *progress) stop() {
	close(p.quit)
	<-p.ended
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }
