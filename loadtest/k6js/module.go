package k6js

import (
	"fmt"
	"regexp"
	"strings"
)

// The ES module syntax a k6 script uses, rewritten into a script goja
// runs: imports become calls of __require, exports become properties of
// __exports. Only these forms are understood; anything else that starts
// with import or export is refused, so a script never runs half-read.
var (
	importDefault = regexp.MustCompile(`^import\s+([A-Za-z_$][\w$]*)\s+from\s+['"]([^'"]+)['"];?\s*$`)
	importNamed   = regexp.MustCompile(`^import\s+\{([^}]*)\}\s+from\s+['"]([^'"]+)['"];?\s*$`)
	exportConst   = regexp.MustCompile(`^export\s+(const|let|var)\s+([A-Za-z_$][\w$]*)\s*=`)
	exportFunc    = regexp.MustCompile(`^export\s+function\s+([A-Za-z_$][\w$]*)\s*\(`)
	exportDefault = regexp.MustCompile(`^export\s+default\s+function\b`)
	importAlias   = regexp.MustCompile(`^([A-Za-z_$][\w$]*)(\s+as\s+([A-Za-z_$][\w$]*))?$`)
)

// rewrite turns a k6 script (an ES module) into a plain script, line by
// line, so that line numbers in errors stay those of the file.
func rewrite(src string) (string, error) {
	lines := strings.Split(src, "\n")
	var tail []string
	for i, line := range lines {
		trim := strings.TrimSpace(line)
		switch {
		case importDefault.MatchString(trim):
			m := importDefault.FindStringSubmatch(trim)
			lines[i] = fmt.Sprintf("const %s = __require(%q).default;", m[1], m[2])
		case importNamed.MatchString(trim):
			m := importNamed.FindStringSubmatch(trim)
			var names []string
			for _, n := range strings.Split(m[1], ",") {
				n = strings.TrimSpace(n)
				if n == "" {
					continue
				}
				a := importAlias.FindStringSubmatch(n)
				if a == nil {
					return "", fmt.Errorf("line %d: import name %q: not understood", i+1, n)
				}
				if a[3] != "" {
					names = append(names, a[1]+": "+a[3])
				} else {
					names = append(names, a[1])
				}
			}
			lines[i] = fmt.Sprintf("const { %s } = __require(%q);", strings.Join(names, ", "), m[2])
		case exportConst.MatchString(trim):
			m := exportConst.FindStringSubmatch(trim)
			lines[i] = strings.Replace(line, m[0], fmt.Sprintf("%s %s = __exports.%s =", m[1], m[2], m[2]), 1)
		case exportFunc.MatchString(trim):
			m := exportFunc.FindStringSubmatch(trim)
			lines[i] = strings.Replace(line, "export ", "", 1)
			tail = append(tail, fmt.Sprintf("__exports.%s = %s;", m[1], m[1]))
		case exportDefault.MatchString(trim):
			lines[i] = strings.Replace(line, "export default function", "__exports.default = function", 1)
		case strings.HasPrefix(trim, "import ") || strings.HasPrefix(trim, "export "):
			return "", fmt.Errorf("line %d: %q: only `import x from`, `import { a, b } from`, `export const|let|var`, `export function` and `export default function` are understood", i+1, trim)
		}
	}
	return strings.Join(append(lines, tail...), "\n"), nil
}
