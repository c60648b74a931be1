#pragma once
/// \file heatmap_svg.hpp
/// A self-contained SVG heat map: one coloured cell per (row, column) with its value printed in
/// it, axis labels, a title and a colour legend. Opens in any browser.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace nvmeio::bench {

/// The data of a heat map: `values[row][column]`, empty where nothing was measured.
struct heatmap {
    std::string title;                                       ///< First line on top.
    std::string subtitle;                                    ///< Second line: method, units.
    std::string row_label;                                   ///< Vertical axis name.
    std::string column_label;                                ///< Horizontal axis name.
    std::vector<std::string> rows;                           ///< Row names, top to bottom.
    std::vector<std::string> columns;                        ///< Column names, left to right.
    std::vector<std::vector<std::optional<double>>> values;  ///< [row][column].
    std::string unit = "GB/s";                               ///< Printed with the legend.
};

namespace detail {

inline std::string xml_escape(const std::string& text) {
    std::string out;
    for (char c : text) {
        switch (c) {
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '&':
                out += "&amp;";
                break;
            case '"':
                out += "&quot;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

// A perceptually ordered scale from dark blue (low) through teal and green to yellow (high),
// close to viridis; `t` in [0, 1].
inline std::string scale_colour(double t) {
    static const double stops[][3] = {
        {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
    t = std::clamp(t, 0.0, 1.0) * 4.0;
    const int i = std::min(3, static_cast<int>(t));
    const double f = t - i;
    char text[16];
    std::snprintf(text, sizeof text, "#%02x%02x%02x",
                  static_cast<int>(std::lround(stops[i][0] + f * (stops[i + 1][0] - stops[i][0]))),
                  static_cast<int>(std::lround(stops[i][1] + f * (stops[i + 1][1] - stops[i][1]))),
                  static_cast<int>(std::lround(stops[i][2] + f * (stops[i + 1][2] - stops[i][2]))));
    return text;
}

inline void svg_text(std::ostream& out, double x, double y, const std::string& s,
                     const std::string& extra) {
    char head[256];
    std::snprintf(head, sizeof head, "<text x=\"%.1f\" y=\"%.1f\" %s>", x, y, extra.c_str());
    out << head << xml_escape(s) << "</text>\n";
}

// Layout and value range of a map.
struct svg_layout {
    static constexpr int cell_w = 96, cell_h = 40, left = 110, top = 96, legend_h = 70;
    double lo = 0, hi = 0;  // smallest and largest value
    [[nodiscard]] double fraction(double v) const { return hi > lo ? (v - lo) / (hi - lo) : 1.0; }
};

inline svg_layout layout_of(const heatmap& map) {
    svg_layout l;
    bool any = false;
    for (const auto& row : map.values) {
        for (const auto& v : row) {
            if (!v) continue;
            l.lo = any ? std::min(l.lo, *v) : *v;
            l.hi = any ? std::max(l.hi, *v) : *v;
            any = true;
        }
    }
    return l;
}

// One cell: its colour, a tooltip, the value, and a red outline on the highest.
inline void write_cell(std::ostream& out, const heatmap& map, const svg_layout& l, int r, int c) {
    const int x = l.left + c * l.cell_w, y = l.top + r * l.cell_h;
    const bool has = r < static_cast<int>(map.values.size()) &&
                     c < static_cast<int>(map.values[r].size()) && map.values[r][c].has_value();
    const double v = has ? map.values[r][c].value_or(0.0) : 0.0;
    const std::string fill = has ? scale_colour(l.fraction(v)) : "#eeeeee";
    out << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << l.cell_w << "\" height=\""
        << l.cell_h << "\" fill=\"" << fill << "\" stroke=\"white\" stroke-width=\"2\"><title>"
        << xml_escape(map.rows[r]) << ", " << xml_escape(map.columns[c]) << "</title></rect>\n";
    char value[32];
    if (has) {
        std::snprintf(value, sizeof value, "%.3g", v);
    } else {
        std::snprintf(value, sizeof value, "-");
    }
    if (has && v == l.hi) {  // the best cell: outlined so it is found at a glance
        out << "<rect x=\"" << x + 2 << "\" y=\"" << y + 2 << "\" width=\"" << l.cell_w - 4
            << "\" height=\"" << l.cell_h - 4
            << "\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"3\"/>\n";
    }
    svg_text(out, x + l.cell_w / 2.0, y + l.cell_h / 2.0 + 5, value,
             has && l.fraction(v) > 0.6 ? "font-size=\"13\" text-anchor=\"middle\" fill=\"#111\""
                                        : "font-size=\"13\" text-anchor=\"middle\" fill=\"#fff\"");
}

// A gradient bar from the smallest to the largest value.
inline void write_legend(std::ostream& out, const heatmap& map, const svg_layout& l, int y) {
    const int width = 260;
    out << "<defs><linearGradient id=\"scale\">\n";
    for (int i = 0; i <= 8; ++i) {
        out << "<stop offset=\"" << i * 12.5 << "%\" stop-color=\"" << scale_colour(i / 8.0)
            << "\"/>\n";
    }
    out << "</linearGradient></defs>\n";
    out << "<rect x=\"" << l.left << "\" y=\"" << y << "\" width=\"" << width
        << "\" height=\"14\" fill=\"url(#scale)\"/>\n";
    char label[64];
    std::snprintf(label, sizeof label, "%.3g", l.lo);
    svg_text(out, l.left, y + 30, label, "font-size=\"11\" text-anchor=\"start\"");
    std::snprintf(label, sizeof label, "%.3g %s", l.hi, map.unit.c_str());
    svg_text(out, l.left + width, y + 30, label, "font-size=\"11\" text-anchor=\"end\"");
    svg_text(out, l.left - 10, y + 12, map.unit, "font-size=\"11\" text-anchor=\"end\"");
    svg_text(out, l.left + width + 16, y + 12, "red outline: highest value",
             "font-size=\"11\" fill=\"#d62728\"");
}

}  // namespace detail

/// Writes `map` as an SVG document. Colours scale linearly from the smallest to the largest value
/// (the legend states both), the highest cell is outlined in red, text is dark on light cells
/// and light on dark ones.
inline void write_svg(std::ostream& out, const heatmap& map) {
    const detail::svg_layout l = detail::layout_of(map);
    const int cols = static_cast<int>(map.columns.size());
    const int rows = static_cast<int>(map.rows.size());
    // Roughly 7 px per character at the sizes used below: wide enough for the longest line.
    const int text_width =
        static_cast<int>(12 + 7.2 * std::max<double>(map.subtitle.size(), map.title.size() * 1.3));
    const int width = std::max({l.left + cols * l.cell_w + 30, 600, text_width});
    const int height = l.top + rows * l.cell_h + l.legend_h;
    out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
        << "\" viewBox=\"0 0 " << width << " " << height
        << "\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n"
        << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    detail::svg_text(out, 12, 26, map.title, "font-size=\"17\" font-weight=\"bold\"");
    detail::svg_text(out, 12, 46, map.subtitle, "font-size=\"12\" fill=\"#444\"");
    detail::svg_text(out, l.left + cols * l.cell_w / 2.0, l.top - 26, map.column_label,
                     "font-size=\"13\" text-anchor=\"middle\"");
    detail::svg_text(out, 18, l.top + rows * l.cell_h / 2.0, map.row_label,
                     "font-size=\"13\" text-anchor=\"middle\" transform=\"rotate(-90 18 " +
                         std::to_string(l.top + rows * l.cell_h / 2) + ")\"");
    for (int c = 0; c < cols; ++c) {
        detail::svg_text(out, l.left + c * l.cell_w + l.cell_w / 2.0, l.top - 8, map.columns[c],
                         "font-size=\"12\" text-anchor=\"middle\" font-weight=\"bold\"");
    }
    for (int r = 0; r < rows; ++r) {
        detail::svg_text(out, l.left - 10, l.top + r * l.cell_h + l.cell_h / 2.0 + 4, map.rows[r],
                         "font-size=\"12\" text-anchor=\"end\" font-weight=\"bold\"");
        for (int c = 0; c < cols; ++c)
            detail::write_cell(out, map, l, r, c);
    }
    detail::write_legend(out, map, l, l.top + rows * l.cell_h + 28);
    out << "</svg>\n";
}

}  // namespace nvmeio::bench
