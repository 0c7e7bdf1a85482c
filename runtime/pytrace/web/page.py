"""The one page of the browser view, assembled from static/ (index.html, app.css,
app.js): served live by `pytrace web`, or written whole, with its data, by
`pytrace export --format html`. Everything is inline (no network, no CDN); a
Content-Security-Policy with a per-page nonce lets only our own script and style run,
and the page may connect to nothing but the server it came from (a report: nothing)."""

import json
import os
import secrets

_STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


def _read(name):
    with open(os.path.join(_STATIC, name), encoding="utf-8") as f:
        return f.read()


def embed_json(data):
    """JSON that is safe inside <script type="application/json">: no '<', '>' or '&'
    reaches the HTML parser, whatever the names hold."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _escape_html(text):
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def build(data, title, live):
    """The page as text. data: the JSON object the script starts from."""
    nonce = secrets.token_urlsafe(16)
    connect = "'self'" if live else "'none'"
    csp = ("default-src 'none'; script-src 'nonce-%s'; style-src 'nonce-%s'; connect-src %s; "
           "img-src 'none'; base-uri 'none'; form-action 'none'" % (nonce, nonce, connect))
    parts = {
        "CSP": _escape_html(csp),
        "TITLE": _escape_html(title),
        "NONCE": nonce,
        "CSS": _read("app.css"),
        "JS": _read("app.js"),
        "DATA": embed_json(data),
    }
    page = _read("index.html")
    # one pass, so a placeholder-looking text inside the data or the script is left alone
    out, pos = [], 0
    while True:
        start = page.find("{{", pos)
        if start < 0:
            out.append(page[pos:])
            break
        end = page.index("}}", start)
        out.append(page[pos:start])
        out.append(parts[page[start + 2:end]])
        pos = end + 2
    return "".join(out), csp
