package runner

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/loadtest/arrival"
	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/summary"
)

// progress draws k6's progress bar while a run runs, and samples the VU
// counts once a second for the report.
type progress struct {
	w           io.Writer
	interactive bool
	sc          *scenario.Scenario
	mode        string
	exec        *arrival.Executor
	rec         *summary.Recorder
	clock       clock.Clock

	stopc chan struct{}
	wg    sync.WaitGroup
}

func newProgress(w io.Writer, interactive bool, sc *scenario.Scenario, mode string, exec *arrival.Executor, rec *summary.Recorder, clk clock.Clock) *progress {
	return &progress{w: w, interactive: interactive, sc: sc, mode: mode, exec: exec, rec: rec, clock: clk, stopc: make(chan struct{})}
}

func (p *progress) start() {
	p.wg.Go(func() {
		tick := p.clock.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		lastSample, lastLine := time.Duration(-1), time.Duration(0)
		for {
			select {
			case <-p.stopc:
				p.draw(true)
				return
			case <-tick.Chan():
			}
			s := p.exec.Snapshot()
			if sec := s.Elapsed.Truncate(time.Second); sec > lastSample {
				lastSample = sec
				p.rec.AddVUs(summary.VUPoint{At: s.Elapsed, Active: s.Active, Allocated: s.Allocated})
			}
			if p.interactive {
				p.draw(false)
			} else if s.Elapsed-lastLine >= 5*time.Second {
				lastLine = s.Elapsed
				p.draw(false)
			}
		}
	})
}

func (p *progress) stop() {
	close(p.stopc)
	p.wg.Wait()
}

// draw prints one state of the bar, as k6 does:
//
//	running (0m05.2s), 003/300 VUs, 257 complete and 0 interrupted iterations
//	provider-down [=====>-----] 003/300 VUs  05.2s/08s  dropped 0
func (p *progress) draw(final bool) {
	if p.w == nil {
		return
	}
	s := p.exec.Snapshot()
	total := p.sc.Duration.D()
	frac := float64(s.Elapsed) / float64(total)
	if frac > 1 {
		frac = 1
	}
	const width = 40
	n := int(frac * width)
	bar := strings.Repeat("=", n)
	if n < width {
		bar += ">" + strings.Repeat("-", width-n-1)
	}
	status := "running"
	if final {
		status = "done"
	}
	line := fmt.Sprintf("%s (%s), %03d/%03d VUs, %d complete and %d interrupted iterations, %d dropped · %s [%s] %s/%s",
		status, elapsed(s.Elapsed), s.Active, p.sc.MaxVUs, s.Completed, s.Interrupted, s.Dropped,
		p.mode, bar, elapsed(min(s.Elapsed, total)), elapsed(total))
	if p.interactive {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		if final {
			fmt.Fprintln(p.w)
		}
		return
	}
	fmt.Fprintln(p.w, line)
}

// elapsed formats d as k6's progress bar does: 0m05.2s.
func elapsed(d time.Duration) string {
	d = d.Round(100 * time.Millisecond)
	return fmt.Sprintf("%dm%04.1fs", int(d.Minutes()), d.Seconds()-60*float64(int(d.Minutes())))
}
