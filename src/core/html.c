/*
 * html.c - HTML, SVG and text output helpers for the HUD and `crcr health`; see html.h.
 *
 * Hand-written on purpose: a template engine would be a dependency for a handful of pages, and
 * the escaping rules that matter (every data string escaped, links only for https://, classes
 * from fixed tables) are easier to audit in one small file.
 */
#include "html.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"

/* ---- HTML ---- */

void hout_init(hout *o, buf_t *b)
{
    o->b = b;
    o->err = CRCR_OK;
}

void h_raw(hout *o, const char *markup)
{
    if (!o->err && markup)
        o->err = buf_puts(o->b, markup);
}

void h_rawf(hout *o, const char *fmt, ...)
{
    if (o->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    o->err = buf_vprintf(o->b, fmt, ap);
    va_end(ap);
}

void h_textn(hout *o, const char *s, size_t n)
{
    if (o->err || !s)
        return;
    size_t start = 0;
    for (size_t i = 0; i < n && !o->err; i++) {
        const char *ent = NULL;
        switch (s[i]) {
        case '&':
            ent = "&amp;";
            break;
        case '<':
            ent = "&lt;";
            break;
        case '>':
            ent = "&gt;";
            break;
        case '"':
            ent = "&quot;";
            break;
        case '\'':
            ent = "&#39;";
            break;
        case '\0':
            ent = "";
            break;
        default:
            continue;
        }
        if (i > start)
            o->err = buf_append(o->b, s + start, i - start);
        if (!o->err)
            o->err = buf_puts(o->b, ent);
        start = i + 1;
    }
    if (!o->err && n > start)
        o->err = buf_append(o->b, s + start, n - start);
}

void h_text(hout *o, const char *s)
{
    if (s)
        h_textn(o, s, strlen(s));
}

crcr_err html_escape(buf_t *b, const char *s)
{
    hout o;
    hout_init(&o, b);
    h_text(&o, s);
    return o.err;
}

void h_url_part(hout *o, const char *s)
{
    static const char HEX[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; p && *p && !o->err; p++) {
        unsigned char c = *p;
        bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_' || c == '~';
        if (keep) {
            o->err = buf_putc(o->b, (char)c);
        } else {
            char enc[4] = {'%', HEX[c >> 4], HEX[c & 15], 0};
            o->err = buf_puts(o->b, enc);
        }
    }
}

bool html_url_ok(const char *url)
{
    if (!url || strncmp(url, "https://", 8) != 0)
        return false;
    size_t n = strlen(url);
    if (n <= 8 || n > HTML_URL_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c <= 0x20 || c == 0x7f || c == '\\')
            return false;
    }
    return true;
}

void h_link(hout *o, const char *url, const char *text, const char *cls)
{
    if (!html_url_ok(url)) {
        h_text(o, text ? text : url);
        return;
    }
    h_raw(o, "<a href=\"");
    h_text(o, url);
    h_raw(o, "\"");
    if (cls) {
        h_raw(o, " class=\"");
        h_raw(o, cls);
        h_raw(o, "\"");
    }
    h_raw(o, " rel=\"noopener noreferrer nofollow\">");
    h_text(o, text ? text : url);
    h_raw(o, "</a>");
}

void html_duration(int64_t ms, char *out, size_t n)
{
    if (ms < 0) {
        snprintf(out, n, "-");
        return;
    }
    long long s = (long long)(ms / 1000);
    if (ms < 1000)
        snprintf(out, n, "%lldms", (long long)ms);
    else if (s < 60)
        snprintf(out, n, "%llds", s);
    else if (s < 3600)
        snprintf(out, n, "%lldm %02llds", s / 60, s % 60);
    else if (s < 86400)
        snprintf(out, n, "%lldh %02lldm", s / 3600, (s % 3600) / 60);
    else
        snprintf(out, n, "%lldd %02lldh", s / 86400, (s % 86400) / 3600);
}

void html_time(int64_t ms, char *out, size_t n)
{
    if (ms <= 0) {
        snprintf(out, n, "-");
        return;
    }
    char iso[32];
    clock_iso8601(ms, iso, sizeof(iso));
    /* 2026-11-30T01:02:03Z -> 2026-11-30 01:02 UTC */
    if (strlen(iso) >= 16)
        snprintf(out, n, "%.10s %.5s UTC", iso, iso + 11);
    else
        snprintf(out, n, "%s", iso);
}

void html_ago(int64_t then_ms, int64_t now_ms, char *out, size_t n)
{
    if (then_ms <= 0) {
        snprintf(out, n, "never");
        return;
    }
    int64_t d = now_ms - then_ms;
    bool future = d < 0;
    long long s = (long long)((future ? -d : d) / 1000);
    char amount[32];
    if (s < 60) {
        snprintf(out, n, future ? "in a moment" : "just now");
        return;
    }
    if (s < 3600)
        snprintf(amount, sizeof(amount), "%lld min", s / 60);
    else if (s < 86400)
        snprintf(amount, sizeof(amount), "%lld h", s / 3600);
    else
        snprintf(amount, sizeof(amount), "%lld d", s / 86400);
    snprintf(out, n, future ? "in %s" : "%s ago", amount);
}

void h_page_begin(hout *o, const char *title, const char *active)
{
    h_raw(o, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
             "<meta name=\"referrer\" content=\"no-referrer\"><title>");
    h_text(o, title);
    h_raw(o, " - crcr</title><link rel=\"stylesheet\" href=\"/crcr/static/style.css\">"
             "<link rel=\"icon\" href=\"data:,\"></head><body><header class=\"top\"><nav>"
             "<a class=\"brand\" href=\"/crcr\">crcr</a>");
    h_rawf(o, "<a href=\"/crcr\"%s>Repos</a>",
           active && strcmp(active, "repos") == 0 ? " class=\"active\"" : "");
    h_rawf(o, "<a href=\"/crcr/deliveries\"%s>Deliveries</a>",
           active && strcmp(active, "deliveries") == 0 ? " class=\"active\"" : "");
    h_raw(o, "<a href=\"/api/v1/repos\">API</a></nav></header><main>");
}

void h_page_end(hout *o, int64_t now_ms, int64_t render_ms)
{
    char t[48];
    html_time(now_ms, t, sizeof(t));
    h_raw(o, "</main><footer>Generated ");
    h_text(o, t);
    h_rawf(o, " in %lld ms by crcr " CRCR_VERSION ".</footer></body></html>\n",
           (long long)render_ms);
}

const char HTML_STYLESHEET[] =
    ":root{--fg:#1f2328;--muted:#59636e;--bg:#fff;--panel:#f6f8fa;--line:#d1d9e0;"
    "--link:#0969da;--ok:#1a7f37;--ok-bg:#dafbe1;--bad:#cf222e;--bad-bg:#ffebe9;"
    "--warn:#7d4e00;--warn-bg:#fff8c5;--run:#0550ae;--run-bg:#ddf4ff;--other-bg:#eaeef2}\n"
    "*{box-sizing:border-box}\n"
    "body{margin:0;font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;"
    "color:var(--fg);background:var(--bg)}\n"
    "a{color:var(--link);text-decoration:none}a:hover{text-decoration:underline}\n"
    "header.top{background:#24292f;padding:.5rem 1rem}\n"
    "header.top nav{display:flex;gap:1rem;flex-wrap:wrap;align-items:center;max-width:1400px;"
    "margin:0 auto}\n"
    "header.top a{color:#f0f3f6}header.top a.active{font-weight:600;text-decoration:underline}\n"
    "header.top a.brand{font-weight:700;margin-right:1rem}\n"
    "main{max-width:1400px;margin:0 auto;padding:1rem}\n"
    "footer{max-width:1400px;margin:2rem auto 1rem;padding:0 1rem;color:var(--muted);"
    "font-size:.85rem}\n"
    "h1{font-size:1.5rem;margin:.2rem 0 1rem;word-break:break-word}\n"
    "h2{font-size:1.2rem;margin:1.6rem 0 .6rem}h3{font-size:1rem;margin:1.2rem 0 .4rem}\n"
    "h2 small{font-size:.85rem;font-weight:400;color:var(--muted)}\n"
    "h1,h2,h3{overflow-wrap:anywhere}\n"
    ".muted{color:var(--muted)}.mono,code{font-family:ui-monospace,SFMono-Regular,Menlo,"
    "monospace;font-size:.9em}\n"
    ".cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:.6rem;"
    "margin:.5rem 0 1rem}\n"
    ".card{background:var(--panel);border:1px solid var(--line);border-radius:8px;"
    "padding:.6rem .8rem}\n"
    ".card .k{color:var(--muted);font-size:.8rem;text-transform:uppercase;letter-spacing:.03em}"
    "\n.card .v{font-size:1.25rem;font-weight:600;word-break:break-word}\n"
    ".card .s{color:var(--muted);font-size:.85rem;word-break:break-word}\n"
    ".scroll{overflow-x:auto;-webkit-overflow-scrolling:touch;border:1px solid var(--line);"
    "border-radius:8px;margin:.4rem 0 1rem}\n"
    "table{border-collapse:collapse;width:100%;font-size:.9rem}\n"
    "th,td{padding:.4rem .6rem;border-bottom:1px solid var(--line);text-align:left;"
    "vertical-align:top}\n"
    "th{background:var(--panel);font-weight:600;white-space:nowrap}\n"
    "td.num,th.num{text-align:right;white-space:nowrap}td.nowrap,td.repo{white-space:nowrap}\n"
    "table.repos{table-layout:fixed}table.repos th:first-child{width:30%}\n"
    "ul.targets{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:.25rem}\n"
    "ul.targets li{border-radius:4px;padding:.05rem .4rem;font-size:.8rem}\n"
    "ul.targets li .state{padding:0 .2rem;background:transparent}\n"
    ".badge.level{color:#fff;background:#24292f}\n"
    ".badge.recovered{color:var(--run);background:var(--run-bg);margin-left:.3rem}\n"
    "tr:last-child td{border-bottom:0}\n"
    "table.matrix th.job{white-space:normal;min-width:7rem;max-width:12rem;font-size:.8rem;"
    "word-break:break-word}\n"
    "table.matrix td{text-align:center}table.matrix td.row{text-align:left;white-space:nowrap}\n"
    ".chip{display:inline-block;padding:.1rem .5rem;border-radius:1rem;font-size:.8rem;"
    "font-weight:600;border:1px solid transparent;white-space:nowrap}\n"
    "a.chip:hover{text-decoration:none;filter:brightness(.95)}\n"
    ".chip-success{color:var(--ok);background:var(--ok-bg);border-color:#4ac26b}\n"
    ".chip-failure{color:var(--bad);background:var(--bad-bg);border-color:#ff8182}\n"
    ".chip-cancelled,.chip-timed_out{color:var(--warn);background:var(--warn-bg);"
    "border-color:#d4a72c}\n"
    ".chip-running{color:var(--run);background:var(--run-bg);border-color:#54aeff}\n"
    ".chip-other{color:var(--fg);background:var(--other-bg);border-color:var(--line)}\n"
    ".chip-superseded{color:var(--muted);background:var(--other-bg);border-color:var(--line);"
    "text-decoration:line-through}\n"
    ".badge{display:inline-block;padding:.1rem .5rem;border-radius:4px;font-size:.8rem;"
    "font-weight:600;white-space:nowrap}\n"
    ".health-healthy{color:var(--ok);background:var(--ok-bg)}\n"
    ".health-at_risk{color:var(--warn);background:var(--warn-bg)}\n"
    ".health-below_level{color:var(--bad);background:var(--bad-bg)}\n"
    ".health-not_measured{color:var(--muted);background:var(--other-bg)}\n"
    ".state{display:inline-block;padding:.05rem .45rem;border-radius:4px;font-size:.8rem;"
    "font-weight:600;white-space:nowrap}\n"
    ".state-sent{color:var(--ok);background:var(--ok-bg)}\n"
    ".state-dead{color:var(--bad);background:var(--bad-bg)}\n"
    ".state-retrying{color:var(--warn);background:var(--warn-bg)}\n"
    ".state-queued,.state-running{color:var(--run);background:var(--run-bg)}\n"
    ".state-dry_run,.state-other,.state-withdrawn{color:var(--fg);background:var(--other-bg)}\n"
    ".tabs{display:flex;gap:.25rem;border-bottom:1px solid var(--line);margin:1rem 0 .5rem;"
    "flex-wrap:wrap}\n"
    ".tabs a{padding:.4rem .8rem;border:1px solid transparent;border-bottom:0;"
    "border-radius:6px 6px 0 0}\n"
    ".tabs a.active{border-color:var(--line);background:var(--bg);font-weight:600;"
    "margin-bottom:-1px}\n"
    ".pager{display:flex;gap:1rem;align-items:center;margin:.5rem 0}\n"
    ".charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(280px,1fr));gap:1rem}\n"
    "figure.chart{margin:0;background:var(--panel);border:1px solid var(--line);"
    "border-radius:8px;padding:.5rem}\n"
    "figure.chart figcaption{font-size:.85rem;font-weight:600;margin-bottom:.3rem}\n"
    "figure.chart svg{width:100%;height:auto;display:block}\n"
    "svg .grid{stroke:#d1d9e0;stroke-width:1}svg .axis{fill:#59636e;font-size:11px}\n"
    "svg .line{fill:none;stroke-width:2}svg .pt{stroke:#fff;stroke-width:1}\n"
    "svg.rate .line{stroke:#1a7f37}svg.rate .pt{fill:#1a7f37}\n"
    "svg.dur .line{stroke:#0969da}svg.dur .pt{fill:#0969da}\n"
    "form.filters{display:flex;gap:.5rem;flex-wrap:wrap;align-items:end;margin:.5rem 0 1rem}\n"
    "form.filters label{display:flex;flex-direction:column;font-size:.8rem;color:var(--muted)}\n"
    "form.filters input,form.filters select,form.filters button{font:inherit;padding:.25rem .4rem}"
    "\n.note{background:var(--panel);border-left:4px solid var(--line);padding:.4rem .8rem;"
    "margin:.5rem 0}\n"
    ".err{color:var(--bad)}\n"
    "@media (max-width:640px){body{font-size:14px}main{padding:.6rem}"
    "th,td{padding:.3rem .4rem}.hide-sm{display:none}h1{font-size:1.25rem}"
    "table.repos{table-layout:auto}table.repos th:first-child{width:auto}"
    "table.repos td.repo{white-space:normal;word-break:break-word}}\n";

/* ---- SVG charts ---- */

#define CHART_W 560
#define CHART_H 170
#define CHART_L 56 /* left margin for the y labels */
#define CHART_R 10
#define CHART_T 12
#define CHART_B 24 /* bottom margin for the x labels */

static void chart_value_text(double v, const char *unit, char *out, size_t n)
{
    if (strcmp(unit, "%") == 0) {
        snprintf(out, n, "%.1f%%", v);
    } else {
        html_duration((int64_t)(v * 1000.0), out, n);
    }
}

void h_chart(hout *o, const html_chart *c)
{
    h_raw(o, "<figure class=\"chart\"><figcaption>");
    h_text(o, c->title);
    h_raw(o, "</figcaption>");
    double ymax = c->ymax;
    size_t have = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (!c->has[i] || !isfinite(c->values[i]))
            continue;
        have++;
        if (c->ymax <= 0 && c->values[i] > ymax)
            ymax = c->values[i];
    }
    if (!have) {
        h_raw(o, "<p class=\"muted\">No completed runs in this window.</p></figure>");
        return;
    }
    if (ymax <= 0)
        ymax = 1;
    h_rawf(o, "<svg viewBox=\"0 0 %d %d\" role=\"img\" class=\"%s\" aria-label=\"", CHART_W,
           CHART_H, c->css_class ? c->css_class : "");
    h_text(o, c->title);
    h_raw(o, "\">");
    int x0 = CHART_L, x1 = CHART_W - CHART_R, y0 = CHART_H - CHART_B, y1 = CHART_T;
    char lab[32];
    chart_value_text(ymax, c->unit, lab, sizeof(lab));
    h_rawf(o, "<line class=\"grid\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>", x0, y1, x1, y1);
    h_rawf(o, "<line class=\"grid\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>", x0, y0, x1, y0);
    h_rawf(o, "<text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"end\">", x0 - 4, y1 + 4);
    h_text(o, lab);
    h_rawf(o, "</text><text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"end\">0</text>", x0 - 4,
           y0 + 4);
    char d0[48], d1[48];
    html_time(c->starts[0], d0, sizeof(d0));
    html_time(c->end ? c->end : c->starts[c->n - 1], d1, sizeof(d1));
    h_rawf(o, "<text class=\"axis\" x=\"%d\" y=\"%d\">", x0, CHART_H - 6);
    h_textn(o, d0, strlen(d0) >= 10 ? 10 : strlen(d0));
    h_rawf(o, "</text><text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"end\">", x1,
           CHART_H - 6);
    h_textn(o, d1, strlen(d1) >= 10 ? 10 : strlen(d1));
    h_raw(o, "</text>");

    double step = c->n > 1 ? (double)(x1 - x0) / (double)(c->n - 1) : 0;
    h_raw(o, "<polyline class=\"line\" points=\"");
    for (size_t i = 0; i < c->n; i++) {
        if (!c->has[i] || !isfinite(c->values[i]))
            continue;
        double x = c->n > 1 ? x0 + step * (double)i : (x0 + x1) / 2.0;
        double v = c->values[i] < 0 ? 0 : (c->values[i] > ymax ? ymax : c->values[i]);
        double y = y0 - (y0 - y1) * v / ymax;
        h_rawf(o, "%.1f,%.1f ", x, y);
    }
    h_raw(o, "\"/>");
    for (size_t i = 0; i < c->n; i++) {
        if (!c->has[i] || !isfinite(c->values[i]))
            continue;
        double x = c->n > 1 ? x0 + step * (double)i : (x0 + x1) / 2.0;
        double v = c->values[i] < 0 ? 0 : (c->values[i] > ymax ? ymax : c->values[i]);
        double y = y0 - (y0 - y1) * v / ymax;
        char when[48], val[32];
        html_time(c->starts[i], when, sizeof(when));
        chart_value_text(c->values[i], c->unit, val, sizeof(val));
        h_rawf(o, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\"><title>", x, y);
        h_text(o, when);
        h_raw(o, ": ");
        h_text(o, val);
        h_raw(o, "</title></circle>");
    }
    h_raw(o, "</svg></figure>");
}
