package xdspush_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdspush/xdspush/xds/xdstest"
)

// TestDocumentedBootstraps finds every xDS bootstrap the repository
// documents (a JSON object with "xds_servers" in a Markdown file or in the
// comments of a Go file, tests excepted) and checks it against what every
// gRPC xDS client requires (xdstest.CheckBootstrap): grpc-js-xds, for one,
// refuses a node without a locality. A bootstrap for mutual TLS with the
// server uses gRFC A65's tls creds, which grpc-js-xds lacks: its document
// must say so.
func TestDocumentedBootstraps(t *testing.T) {
	found := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".md") && (!strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go")) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := string(data)
		if strings.HasSuffix(path, ".go") {
			text = comments(text)
		}
		for _, b := range bootstraps(text) {
			found++
			var opts []xdstest.BootstrapOption
			if strings.Contains(b, `"type":"tls"`) || strings.Contains(b, `"type": "tls"`) {
				// For a server that requires client certificates: gRFC
				// A65's creds, which the document must say grpc-js-xds
				// lacks.
				if !strings.Contains(text, "A65") {
					t.Errorf("%s: a bootstrap with tls channel_creds, but no word of gRFC A65 (which clients load it)", path)
				}
				opts = append(opts, xdstest.AllowTLSCreds())
			}
			if err := xdstest.CheckBootstrap([]byte(b), opts...); err != nil {
				t.Errorf("%s: %v\n%s", path, err, b)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("found no documented bootstrap; the README documents one")
	}
}

// comments returns the text of the // comments of Go source.
func comments(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		if c, ok := strings.CutPrefix(strings.TrimSpace(line), "//"); ok {
			b.WriteString(c)
			b.WriteString("\n")
		}
	}
	return b.String()
}

// bootstraps returns the JSON objects of text that hold "xds_servers":
// from the brace before each occurrence to its matching brace.
func bootstraps(text string) []string {
	var out []string
	for i := 0; ; {
		j := strings.Index(text[i:], `"xds_servers"`)
		if j < 0 {
			return out
		}
		at := i + j
		start := strings.LastIndexByte(text[:at], '{')
		i = at + 1
		if start < 0 {
			continue
		}
		depth := 0
		for k := start; k < len(text); k++ {
			switch text[k] {
			case '{':
				depth++
			case '}':
				depth--
			}
			if depth == 0 {
				out = append(out, text[start:k+1])
				i = k + 1
				break
			}
		}
	}
}
