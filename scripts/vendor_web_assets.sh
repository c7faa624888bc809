#!/usr/bin/env bash
# Re-create service/api/static/vendor/: the Swagger UI (/docs) and ReDoc (/redoc) assets the service
# serves itself, so the docs work on an air-gapped cluster (no CDN).
#
#   bash scripts/vendor_web_assets.sh
#
# Needs npm and a reachable npm registry. The versions and the tarballs' integrity (npm's
# dist.integrity, sha512) are pinned here; a tarball whose hash differs is refused before anything
# is copied. Only the files the pages load, and the licenses that go with them, are copied, byte for
# byte. To move to a new version: change it here and in service/api/_routes_docs.py, set the new
# integrity from `npm view PACKAGE@VERSION dist.integrity`, run this, and run
# tests/service/api/test_docs_offline.py.
set -euo pipefail
cd "$(dirname "$0")/.."

SWAGGER_VERSION=5.35.0
SWAGGER_INTEGRITY='sha512-U06rpMtW9V3XPGOBeamTUSr0Z09jMX4IJuANpE/EZbAhw0G8CgwrzU4YmXkn/h0wCDNsXdGarTNNHC3sU8yVUQ=='
SWAGGER_FILES=(swagger-ui-bundle.js swagger-ui-bundle.js.LICENSE.txt swagger-ui.css favicon-32x32.png LICENSE NOTICE)

REDOC_VERSION=2.5.4
REDOC_INTEGRITY='sha512-M6jWhG1qoBnH6TFmzJnstyCZ87HmOY/UzDm78mHiYihEdlV/YcS9ogOo1NlElnJMeLsyxHFe2yFc4sNjHTrABQ=='
REDOC_FILES=(bundles/redoc.standalone.js bundles/redoc.standalone.js.LICENSE.txt LICENSE)

dest=service/api/static/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

sri() {  # the Subresource Integrity string of a file, as npm writes it: sha512-<base64>
    python3 -c 'import base64, hashlib, sys; print("sha512-" + base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' "$1"
}

fetch() {  # fetch PACKAGE VERSION INTEGRITY: the tarball, checked, unpacked under $work/PACKAGE
    local package=$1 version=$2 integrity=$3 tarball actual
    tarball=$(cd "$work" && npm pack --silent "$package@$version" | tail -n 1)
    actual=$(sri "$work/$tarball")
    if [ "$actual" != "$integrity" ]; then
        echo "$package@$version: the tarball's integrity is $actual, expected $integrity; nothing copied" >&2
        exit 1
    fi
    mkdir "$work/$package"
    tar -xzf "$work/$tarball" -C "$work/$package"
}

copy() {  # copy PACKAGE DIR FILE...: each FILE of the package (a path inside it) into $dest/DIR/, flat
    local package=$1 dir=$2 file
    shift 2
    mkdir -p "$dest/$dir"
    for file in "$@"; do
        cp "$work/$package/package/$file" "$dest/$dir/$(basename "$file")"
    done
}

fetch swagger-ui-dist "$SWAGGER_VERSION" "$SWAGGER_INTEGRITY"
fetch redoc "$REDOC_VERSION" "$REDOC_INTEGRITY"

rm -rf "$dest"
copy swagger-ui-dist "swagger-ui-dist-$SWAGGER_VERSION" "${SWAGGER_FILES[@]}"
copy redoc "redoc-$REDOC_VERSION" "${REDOC_FILES[@]}"

cat >"$dest/README.md" <<EOF
# Vendored web assets

Written by \`scripts/vendor_web_assets.sh\` (run it to re-create this folder; do not edit by hand).
The service serves these files itself under \`/static/vendor/\` so that \`/docs\` (Swagger UI) and
\`/redoc\` (ReDoc) work without internet access. Each file is a byte-for-byte copy from the npm
tarball; the tarball's integrity (npm's \`dist.integrity\`) was checked before copying.

| package | version | npm tarball integrity | copied into |
| --- | --- | --- | --- |
| swagger-ui-dist (Apache-2.0) | $SWAGGER_VERSION | \`$SWAGGER_INTEGRITY\` | \`swagger-ui-dist-$SWAGGER_VERSION/\` |
| redoc (MIT) | $REDOC_VERSION | \`$REDOC_INTEGRITY\` | \`redoc-$REDOC_VERSION/\` |

Copied from swagger-ui-dist: ${SWAGGER_FILES[*]}.

Copied from redoc: ${REDOC_FILES[*]}.

\`*.LICENSE.txt\` hold the licenses of the third-party code inside each bundle (the bundle's first
line points at it); \`LICENSE\` (and swagger-ui's \`NOTICE\`) are the packages' own. Source maps are
not copied (a browser asks for them only with its developer tools open, and gets a 404).

Runtime requests to other hosts: Swagger UI makes none (its validator badge is off:
\`validatorUrl: null\`). ReDoc's sidebar footer always shows \`https://cdn.redoc.ly/redoc/logo-mini.svg\`
(no ReDoc option turns it off); the Content-Security-Policy of /redoc (\`img-src 'self' data:\`,
service/api/_routes_docs.py) stops that request in the browser, and the image hides itself.
ReDoc is served without Google Fonts (\`with_google_fonts=False\`).
EOF

for file in "$dest"/*/*; do
    printf '%9d  %s\n' "$(wc -c <"$file")" "$file"
done
