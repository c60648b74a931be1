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

}  // namespace detail

/// Writes `map` as an SVG document. Colours scale linearly from the smallest to the largest value
/// (the legend states both), the highest cell is outlined in red, text is dark on light cells
/// and light on dark ones.
inline void write_svg(std::ostream& out, const heatmap& map) {
    const int cell_w = 96, cell_h = 40, left = 110, top = 96, legend_h = 70;
    const int cols = static_cast<int>(map.columns.size());
    const int rows = static_cast<int>(map.rows.size());
    // Roughly 7 px per character at the sizes used below: wide enough for the longest line.
    const int text_width =
        static_cast<int>(12 + 7.2 * std::max<double>(map.subtitle.size(), map.title.size() * 1.3));
    const int width = std::max({left + cols * cell_w + 30, 600, text_width});
    const int height = top + rows * cell_h + legend_h;
    double lo = 0, hi = 0;
    bool any = false;
    for (const auto& row : map.values) {
        for (const auto& v : row) {
            if (!v) continue;
            lo = any ? std::min(lo, *v) : *v;
            hi = any ? std::max(hi, *v) : *v;
            any = true;
        }
    }
    auto fraction = [&](double v) { return hi > lo ? (v - lo) / (hi - lo) : 1.0; };
    auto text = [&](double x, double y, const std::string& s, const std::string& extra) {
        char head[256];
        std::snprintf(head, sizeof head, "<text x=\"%.1f\" y=\"%.1f\" %s>", x, y, extra.c_str());
        out << head << detail::xml_escape(s) << "</text>\n";
    };

    out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
        << "\" viewBox=\"0 0 " << width << " " << height
        << "\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n"
        << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    text(12, 26, map.title, "font-size=\"17\" font-weight=\"bold\"");
    text(12, 46, map.subtitle, "font-size=\"12\" fill=\"#444\"");
    text(left + cols * cell_w / 2.0, top - 26, map.column_label,
         "font-size=\"13\" text-anchor=\"middle\"");
    text(18, top + rows * cell_h / 2.0, map.row_label,
         "font-size=\"13\" text-anchor=\"middle\" transform=\"rotate(-90 18 " +
             std::to_string(top + rows * cell_h / 2) + ")\"");
    for (int c = 0; c < cols; ++c) {
        text(left + c * cell_w + cell_w / 2.0, top - 8, map.columns[c],
             "font-size=\"12\" text-anchor=\"middle\" font-weight=\"bold\"");
    }
    for (int r = 0; r < rows; ++r) {
        text(left - 10, top + r * cell_h + cell_h / 2.0 + 4, map.rows[r],
             "font-size=\"12\" text-anchor=\"end\" font-weight=\"bold\"");
        for (int c = 0; c < cols; ++c) {
            const int x = left + c * cell_w, y = top + r * cell_h;
            const bool has = r < static_cast<int>(map.values.size()) &&
                             c < static_cast<int>(map.values[r].size()) &&
                             map.values[r][c].has_value();
            const double v = has ? map.values[r][c].value_or(0.0) : 0.0;
            const std::string fill = has ? detail::scale_colour(fraction(v)) : "#eeeeee";
            out << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << cell_w << "\" height=\""
                << cell_h << "\" fill=\"" << fill
                << "\" stroke=\"white\" stroke-width=\"2\"><title>"
                << detail::xml_escape(map.rows[r]) << ", " << detail::xml_escape(map.columns[c])
                << "</title></rect>\n";
            char value[32];
            if (has) {
                std::snprintf(value, sizeof value, "%.3g", v);
            } else {
                std::snprintf(value, sizeof value, "-");
            }
            if (has && v == hi) {  // the best cell: outlined so it is found at a glance
                out << "<rect x=\"" << x + 2 << "\" y=\"" << y + 2 << "\" width=\"" << cell_w - 4
                    << "\" height=\"" << cell_h - 4
                    << "\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"3\"/>\n";
            }
            text(x + cell_w / 2.0, y + cell_h / 2.0 + 5, value,
                 has && fraction(v) > 0.6
                     ? "font-size=\"13\" text-anchor=\"middle\" fill=\"#111\""
                     : "font-size=\"13\" text-anchor=\"middle\" fill=\"#fff\"");
        }
    }
    // Legend: a gradient bar from the smallest to the largest value.
    const int legend_y = top + rows * cell_h + 28;
    const int legend_w = 260;
    out << "<defs><linearGradient id=\"scale\">\n";
    for (int i = 0; i <= 8; ++i) {
        out << "<stop offset=\"" << i * 12.5 << "%\" stop-color=\"" << detail::scale_colour(i / 8.0)
            << "\"/>\n";
    }
    out << "</linearGradient></defs>\n";
    out << "<rect x=\"" << left << "\" y=\"" << legend_y << "\" width=\"" << legend_w
        << "\" height=\"14\" fill=\"url(#scale)\"/>\n";
    char label[64];
    std::snprintf(label, sizeof label, "%.3g", lo);
    text(left, legend_y + 30, label, "font-size=\"11\" text-anchor=\"start\"");
    std::snprintf(label, sizeof label, "%.3g %s", hi, map.unit.c_str());
    text(left + legend_w, legend_y + 30, label, "font-size=\"11\" text-anchor=\"end\"");
    text(left - 10, legend_y + 12, map.unit, "font-size=\"11\" text-anchor=\"end\"");
    text(left + legend_w + 16, legend_y + 12, "red outline: highest value",
         "font-size=\"11\" fill=\"#d62728\"");
    out << "</svg>\n";
}

}  // namespace nvmeio::bench
