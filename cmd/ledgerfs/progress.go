package main

import (
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// newBar returns a progress bar of total steps drawn on standard error
// when that is a terminal, and one that draws nothing otherwise: output
// piped to a file or another program gets no progress lines in it.
func newBar(total int64, desc string) *progressbar.ProgressBar {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return progressbar.DefaultSilent(total)
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionFullWidth(),
	)
}

// phases is a bar per phase of a command that goes through several, each
// with its own count (bench's).
type phases struct {
	phase string
	bar   *progressbar.ProgressBar
}

// update shows a phase's progress; a total of 0 is unknown (a spinner).
func (p *phases) update(phase string, done, total int) {
	if phase != p.phase {
		p.done()
		if total <= 0 {
			total = -1
		}
		p.phase, p.bar = phase, newBar(int64(total), phase)
	}
	p.bar.Set(done)
}

func (p *phases) done() {
	if p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
	p.phase = ""
}
