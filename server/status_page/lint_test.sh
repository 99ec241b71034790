#!/usr/bin/env bash
# Static checks of the status page's files: app.js parses (node --check),
# every element id the script looks up exists in index.html, and nothing
# loads from another host (no http(s):// or protocol-relative URL in src/href
# or url(), fetches only /api/ paths), so the page renders offline.
set -uo pipefail
HTML="$1"; JS="$2"; CSS="$3"
fail() { echo "FAIL: $*"; exit 1; }
command -v node >/dev/null || fail "node is not installed (bash deploy/setup.sh installs nodejs)"
node --check "$JS" || fail "$JS does not parse"
ids=$(grep -o "\$('[a-z-]*')" "$JS" | sed "s/\$('\(.*\)')/\1/" | sort -u)
[ -n "$ids" ] || fail "no \$('id') lookups found in $JS"
for id in $ids; do
  grep -q "id=\"$id\"" "$HTML" || fail "$JS looks up #$id, which $HTML does not have"
done
if grep -nE "(src|href)=\"(https?:)?//" "$HTML"; then fail "$HTML loads from another host"; fi
if grep -nE "url\((['\"])?(https?:)?//" "$CSS"; then fail "$CSS loads from another host"; fi
if grep -nE "fetch\(" "$JS" | grep -v "fetch(url"; then fail "$JS fetches something other than getJson(url)"; fi
if grep -nE "getJson\('" "$JS" | grep -v "getJson('/api/"; then fail "$JS fetches outside /api/"; fi
if grep -nE "https?://" "$JS" | grep -v "SVG_NS = 'http://www.w3.org/2000/svg'"; then
  fail "$JS names a URL"
fi
echo "PASS: $(wc -w <<<"$ids") ids, no external URLs"
