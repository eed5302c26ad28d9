// Command termshot renders a terminal screen captured with colours
// (tmux capture-pane -p -e -N) to a PNG, for the console guide's
// screenshots (docs/operator/console.md):
//
//	tmux capture-pane -p -e -N -t SESSION | go run ./termshot -font DejaVuSansMono.ttf -o shot.png
//
// It understands the SGR sequences the console uses: 16, 256 and 24-bit
// colours, bold and reverse video.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

type cell struct {
	r        rune
	fg, bg   color.Color
	bold     bool
	occupied bool
}

var (
	defFG = color.RGBA{0xd0, 0xd0, 0xd0, 0xff}
	defBG = color.RGBA{0x1c, 0x1c, 0x1c, 0xff}
)

func main() {
	fontPath := flag.String("font", "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf", "regular monospace TTF")
	boldPath := flag.String("bold", "/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf", "bold monospace TTF")
	out := flag.String("o", "screenshot.png", "output PNG")
	size := flag.Float64("size", 15, "font size in points at 72 dpi")
	flag.Parse()
	if err := run(os.Stdin, *fontPath, *boldPath, *out, *size); err != nil {
		fmt.Fprintln(os.Stderr, "termshot:", err)
		os.Exit(1)
	}
}

func loadFace(path string, size float64) (font.Face, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := opentype.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return opentype.NewFace(f, &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingFull})
}

func run(in io.Reader, fontPath, boldPath, out string, size float64) error {
	regular, err := loadFace(fontPath, size)
	if err != nil {
		return err
	}
	bold, err := loadFace(boldPath, size)
	if err != nil {
		return err
	}
	var rows [][]cell
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	// tmux emits attributes only where they change, so they carry over
	// from one line to the next.
	st := &pen{fg: defFG, bg: defBG}
	for sc.Scan() {
		rows = append(rows, parseLine(sc.Text(), st))
	}
	if err := sc.Err(); err != nil {
		return err
	}
	cols := 0
	for _, r := range rows {
		cols = max(cols, len(r))
	}
	m := regular.Metrics()
	adv, _ := regular.GlyphAdvance('M')
	cw, ch := adv.Ceil(), (m.Ascent+m.Descent).Ceil()+2
	pad := 12
	img := image.NewRGBA(image.Rect(0, 0, cols*cw+2*pad, len(rows)*ch+2*pad))
	draw.Draw(img, img.Bounds(), image.NewUniform(defBG), image.Point{}, draw.Src)
	for y, row := range rows {
		for x, c := range row {
			rect := image.Rect(pad+x*cw, pad+y*ch, pad+(x+1)*cw, pad+(y+1)*ch)
			draw.Draw(img, rect, image.NewUniform(c.bg), image.Point{}, draw.Src)
			if c.r == 0 || c.r == ' ' {
				continue
			}
			face := regular
			if c.bold {
				face = bold
			}
			d := font.Drawer{Dst: img, Src: image.NewUniform(c.fg), Face: face,
				Dot: fixed.P(pad+x*cw, pad+y*ch+m.Ascent.Ceil()+1)}
			d.DrawString(string(c.r))
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pen is the current drawing attributes.
type pen struct {
	fg, bg    color.Color
	bold, rev bool
}

// parseLine turns one captured line into cells. Wide characters are not
// expected on the console's screens and take one cell here.
func parseLine(s string, p *pen) []cell {
	var out []cell
	fg, bg, boldOn, rev := p.fg, p.bg, p.bold, p.rev
	defer func() { p.fg, p.bg, p.bold, p.rev = fg, bg, boldOn, rev }()
	for i := 0; i < len(s); {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			if j < len(s) && s[j] == 'm' {
				fg, bg, boldOn, rev = sgr(s[i+2:j], fg, bg, boldOn, rev)
			}
			i = j + 1
			continue
		}
		r, n := rune(s[i]), 1
		if r >= 0x80 {
			r, n = decodeRune(s[i:])
		}
		i += n
		c := cell{r: r, fg: fg, bg: bg, bold: boldOn, occupied: true}
		if rev {
			c.fg, c.bg = bg, fg
		}
		out = append(out, c)
	}
	return out
}

func decodeRune(s string) (rune, int) {
	for _, r := range s {
		return r, len(string(r))
	}
	return 0, 1
}

func sgr(params string, fg, bg color.Color, bold, rev bool) (color.Color, color.Color, bool, bool) {
	ps := strings.Split(params, ";")
	if params == "" {
		ps = []string{"0"}
	}
	num := func(i int) int { n, _ := strconv.Atoi(ps[i]); return n }
	for i := 0; i < len(ps); i++ {
		switch n := num(i); {
		case n == 0:
			fg, bg, bold, rev = defFG, defBG, false, false
		case n == 1:
			bold = true
		case n == 22:
			bold = false
		case n == 7:
			rev = true
		case n == 27:
			rev = false
		case n == 39:
			fg = defFG
		case n == 49:
			bg = defBG
		case n >= 30 && n <= 37:
			fg = ansi16(n - 30)
		case n >= 90 && n <= 97:
			fg = ansi16(n - 90 + 8)
		case n >= 40 && n <= 47:
			bg = ansi16(n - 40)
		case n >= 100 && n <= 107:
			bg = ansi16(n - 100 + 8)
		case (n == 38 || n == 48) && i+1 < len(ps):
			var c color.Color
			if num(i+1) == 5 && i+2 < len(ps) {
				c = ansi256(num(i + 2))
				i += 2
			} else if num(i+1) == 2 && i+4 < len(ps) {
				c = color.RGBA{uint8(num(i + 2)), uint8(num(i + 3)), uint8(num(i + 4)), 0xff}
				i += 4
			} else {
				continue
			}
			if n == 38 {
				fg = c
			} else {
				bg = c
			}
		}
	}
	return fg, bg, bold, rev
}

var base16 = []color.RGBA{
	{0, 0, 0, 255}, {205, 49, 49, 255}, {13, 188, 121, 255}, {229, 229, 16, 255},
	{36, 114, 200, 255}, {188, 63, 188, 255}, {17, 168, 205, 255}, {229, 229, 229, 255},
	{102, 102, 102, 255}, {241, 76, 76, 255}, {35, 209, 139, 255}, {245, 245, 67, 255},
	{59, 142, 234, 255}, {214, 112, 214, 255}, {41, 184, 219, 255}, {255, 255, 255, 255},
}

func ansi16(i int) color.Color { return base16[i] }

func ansi256(i int) color.Color {
	switch {
	case i < 16:
		return base16[i]
	case i < 232:
		i -= 16
		lv := []uint8{0, 95, 135, 175, 215, 255}
		return color.RGBA{lv[i/36], lv[(i/6)%6], lv[i%6], 255}
	}
	g := uint8(8 + (i-232)*10)
	return color.RGBA{g, g, g, 255}
}
