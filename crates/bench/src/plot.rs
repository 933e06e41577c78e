//! Bar charts as PNG files, with no graphics library: an RGB canvas, a 5×7 bitmap font for
//! labels, and a PNG encoder (zlib stored blocks: the charts are small and mostly flat colour,
//! and no compressor is needed to be valid).

use std::io::Write;

/// An RGB colour.
pub type Rgb = [u8; 3];

const WHITE: Rgb = [255, 255, 255];
const INK: Rgb = [40, 40, 40];
const GRID: Rgb = [225, 225, 225];
/// Series colours, in order (colour-blind safe).
pub const PALETTE: [Rgb; 6] = [
    [0, 114, 178],
    [230, 159, 0],
    [0, 158, 115],
    [204, 121, 167],
    [86, 180, 233],
    [213, 94, 0],
];

/// An RGB image.
pub struct Canvas {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl Canvas {
    pub fn new(width: usize, height: usize) -> Canvas {
        let mut pixels = Vec::with_capacity(width * height * 3);
        for _ in 0..width * height {
            pixels.extend_from_slice(&WHITE);
        }
        Canvas {
            width,
            height,
            pixels,
        }
    }

    pub fn pixel(&self, x: usize, y: usize) -> Rgb {
        let i = (y * self.width + x) * 3;
        [self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]]
    }

    /// Fill the rectangle [x0, x1) × [y0, y1), clipped to the canvas.
    pub fn fill(&mut self, x0: usize, y0: usize, x1: usize, y1: usize, c: Rgb) {
        for y in y0.min(self.height)..y1.min(self.height) {
            for x in x0.min(self.width)..x1.min(self.width) {
                let i = (y * self.width + x) * 3;
                self.pixels[i..i + 3].copy_from_slice(&c);
            }
        }
    }

    /// Draw `text` with its top-left corner at (x, y), `scale` pixels per font dot. Letters
    /// are drawn in capitals; characters the font lacks are drawn as a box.
    pub fn text(&mut self, x: usize, y: usize, text: &str, scale: usize, c: Rgb) {
        for (i, ch) in text.chars().enumerate() {
            let rows = glyph(ch);
            let left = x + i * 6 * scale;
            for (r, bits) in rows.iter().enumerate() {
                for col in 0..5 {
                    if bits & (0x10 >> col) != 0 {
                        let px = left + col * scale;
                        let py = y + r * scale;
                        self.fill(px, py, px + scale, py + scale, c);
                    }
                }
            }
        }
    }

    /// The width `text` takes at `scale`.
    pub fn text_width(text: &str, scale: usize) -> usize {
        (text.chars().count() * 6).saturating_sub(1) * scale
    }

    /// The image as a PNG file (8-bit RGB, no interlace).
    pub fn png(&self) -> Vec<u8> {
        let mut raw = Vec::with_capacity((self.width * 3 + 1) * self.height);
        for row in self.pixels.chunks(self.width * 3) {
            raw.push(0); // filter: none
            raw.extend_from_slice(row);
        }
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = Vec::new();
        ihdr.extend_from_slice(&(self.width as u32).to_be_bytes());
        ihdr.extend_from_slice(&(self.height as u32).to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
        chunk(&mut out, b"IHDR", &ihdr);
        chunk(&mut out, b"IDAT", &zlib_stored(&raw));
        chunk(&mut out, b"IEND", &[]);
        out
    }
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// A zlib stream of uncompressed deflate blocks (RFC 1950/1951).
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let mut blocks = data.chunks(65_535).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        let last = blocks.peek().is_none();
        out.push(u8::from(last));
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    let _ = out.write_all(&((b << 16) | a).to_be_bytes());
    out
}

/// The 5×7 dots of `ch` (bit 4 is the leftmost column).
fn glyph(ch: char) -> [u8; 7] {
    match ch.to_ascii_uppercase() {
        ' ' => [0; 7],
        '0' => [0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e],
        '1' => [0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e],
        '2' => [0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f],
        '3' => [0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e],
        '4' => [0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02],
        '5' => [0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e],
        '6' => [0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e],
        '7' => [0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e],
        '9' => [0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c],
        'A' => [0x0e, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11],
        'B' => [0x1e, 0x11, 0x11, 0x1e, 0x11, 0x11, 0x1e],
        'C' => [0x0e, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0e],
        'D' => [0x1c, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1c],
        'E' => [0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x1f],
        'F' => [0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x10],
        'G' => [0x0e, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0f],
        'H' => [0x11, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11],
        'I' => [0x0e, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e],
        'J' => [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0c],
        'K' => [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1f],
        'M' => [0x11, 0x1b, 0x15, 0x15, 0x11, 0x11, 0x11],
        'N' => [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
        'O' => [0x0e, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e],
        'P' => [0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10, 0x10],
        'Q' => [0x0e, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0d],
        'R' => [0x1e, 0x11, 0x11, 0x1e, 0x14, 0x12, 0x11],
        'S' => [0x0f, 0x10, 0x10, 0x0e, 0x01, 0x01, 0x1e],
        'T' => [0x1f, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e],
        'V' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x0a, 0x04],
        'W' => [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0a],
        'X' => [0x11, 0x11, 0x0a, 0x04, 0x0a, 0x11, 0x11],
        'Y' => [0x11, 0x11, 0x11, 0x0a, 0x04, 0x04, 0x04],
        'Z' => [0x1f, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1f],
        '.' => [0, 0, 0, 0, 0, 0x0c, 0x0c],
        ',' => [0, 0, 0, 0, 0x0c, 0x04, 0x08],
        ':' => [0, 0x0c, 0x0c, 0, 0x0c, 0x0c, 0],
        '-' => [0, 0, 0, 0x1f, 0, 0, 0],
        '_' => [0, 0, 0, 0, 0, 0, 0x1f],
        '/' => [0, 0x01, 0x02, 0x04, 0x08, 0x10, 0],
        '%' => [0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03],
        '(' => [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02],
        ')' => [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08],
        '=' => [0, 0, 0x1f, 0, 0x1f, 0, 0],
        '+' => [0, 0x04, 0x04, 0x1f, 0x04, 0x04, 0],
        '<' => [0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02],
        '>' => [0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08],
        _ => [0x1f, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1f],
    }
}

/// A grouped bar chart: one group per category, one bar per series in each group.
pub struct BarChart<'a> {
    pub title: &'a str,
    /// What the values measure, drawn above the axis (e.g. "OPS/S").
    pub unit: &'a str,
    pub categories: &'a [String],
    pub series: &'a [String],
    /// values[series][category]; None: no bar.
    pub values: &'a [Vec<Option<f64>>],
}

impl BarChart<'_> {
    pub fn draw(&self) -> Canvas {
        let (width, height) = (
            (120 + self.categories.len() * (self.series.len() * 22 + 30)).max(480),
            360,
        );
        let mut c = Canvas::new(width, height);
        let (left, top, bottom) = (70usize, 50usize, height - 60);
        let right = width - 20;
        c.text(10, 10, self.title, 2, INK);
        c.text(10, 32, self.unit, 1, INK);
        let max = self
            .values
            .iter()
            .flatten()
            .flatten()
            .fold(0.0f64, |m, v| m.max(*v));
        let top_value = nice_ceiling(max);
        // Horizontal grid lines with their values.
        for i in 0..=4 {
            let v = top_value * i as f64 / 4.0;
            let y = bottom - (bottom - top) * i / 4;
            c.fill(left, y, right, y + 1, GRID);
            let label = short_number(v);
            let w = Canvas::text_width(&label, 1);
            c.text(
                left.saturating_sub(w + 6),
                y.saturating_sub(3),
                &label,
                1,
                INK,
            );
        }
        c.fill(left, top, left + 1, bottom + 1, INK);
        c.fill(left, bottom, right, bottom + 1, INK);
        let group = (right - left) / self.categories.len().max(1);
        let bar = ((group.saturating_sub(16)) / self.series.len().max(1)).clamp(4, 40);
        for (ci, category) in self.categories.iter().enumerate() {
            let x0 = left + ci * group + (group - bar * self.series.len()) / 2;
            for (si, values) in self.values.iter().enumerate() {
                let Some(v) = values.get(ci).copied().flatten() else {
                    continue;
                };
                let h = if top_value > 0.0 {
                    ((v / top_value) * (bottom - top) as f64).round() as usize
                } else {
                    0
                };
                let x = x0 + si * bar;
                c.fill(
                    x,
                    bottom - h.min(bottom - top),
                    x + bar - 2,
                    bottom,
                    PALETTE[si % PALETTE.len()],
                );
            }
            let label: String = category.chars().take(group / 6).collect();
            let w = Canvas::text_width(&label, 1);
            let cx = left + ci * group + group / 2;
            c.text(cx.saturating_sub(w / 2), bottom + 8, &label, 1, INK);
        }
        // The legend.
        let mut x = left;
        for (si, name) in self.series.iter().enumerate() {
            c.fill(
                x,
                height - 24,
                x + 10,
                height - 14,
                PALETTE[si % PALETTE.len()],
            );
            c.text(x + 14, height - 23, name, 1, INK);
            x += 14 + Canvas::text_width(name, 1) + 20;
        }
        c
    }
}

/// The smallest of 1, 2, 2.5, 5 × 10^k at or above `v`.
fn nice_ceiling(v: f64) -> f64 {
    if v.is_nan() || v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

/// 1234 → "1.2K", 2500000 → "2.5M", 0.25 → "0.25".
pub fn short_number(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if v >= 1e6 {
        format!("{}M", trim(format!("{:.1}", v / 1e6)))
    } else if v >= 1e3 {
        format!("{}K", trim(format!("{:.1}", v / 1e3)))
    } else if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        trim(format!("{v:.2}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_has_the_structure_decoders_check() {
        let mut c = Canvas::new(3, 2);
        c.fill(1, 0, 2, 1, [1, 2, 3]);
        let png = c.png();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&png[12..16], b"IHDR");
        assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 3);
        assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 2);
        // IHDR's CRC covers its type and data.
        let crc = u32::from_be_bytes(png[29..33].try_into().unwrap());
        assert_eq!(crc, crc32fast::hash(&png[12..29]));
        // The pixel data: zlib header, one final stored block of 2 rows of 1 + 9 bytes.
        assert_eq!(&png[37..41], b"IDAT");
        let idat = &png[41..41 + u32::from_be_bytes(png[33..37].try_into().unwrap()) as usize];
        assert_eq!(&idat[..3], &[0x78, 0x01, 1]);
        assert_eq!(u16::from_le_bytes([idat[3], idat[4]]), 20);
        assert_eq!(&idat[7 + 1 + 3..7 + 1 + 6], &[1, 2, 3]);
        assert!(png.ends_with(&[0xae, 0x42, 0x60, 0x82]), "IEND's CRC");
    }

    #[test]
    fn stored_blocks_split_at_64k_and_carry_adler32() {
        let data = vec![7u8; 70_000];
        let z = zlib_stored(&data);
        assert_eq!(z[2], 0, "first block not final");
        assert_eq!(u16::from_le_bytes([z[3], z[4]]), 65_535);
        let second = 2 + 5 + 65_535;
        assert_eq!(z[second], 1, "second block final");
        assert_eq!(u16::from_le_bytes([z[second + 1], z[second + 2]]), 4_465);
        let (mut a, mut b) = (1u64, 0u64);
        for &x in &data {
            a = (a + x as u64) % 65_521;
            b = (b + a) % 65_521;
        }
        assert_eq!(
            u32::from_be_bytes(z[z.len() - 4..].try_into().unwrap()) as u64,
            (b << 16) | a
        );
    }

    #[test]
    fn bars_are_as_tall_as_their_values() {
        let categories = vec!["A".to_string(), "B".to_string()];
        let series = vec!["one".to_string(), "two".to_string()];
        let values = vec![vec![Some(100.0), Some(50.0)], vec![Some(20.0), None]];
        let chart = BarChart {
            title: "T",
            unit: "OPS/S",
            categories: &categories,
            series: &series,
            values: &values,
        };
        let c = chart.draw();
        // Count each series' coloured pixels in one column through every bar.
        let height_of = |colour: Rgb| -> Vec<usize> {
            let mut heights = Vec::new();
            let mut x = 0;
            while x < c.width {
                let n = (0..c.height - 30)
                    .filter(|&y| c.pixel(x, y) == colour)
                    .count();
                if n > 0 {
                    heights.push(n);
                    // Skip the rest of this bar.
                    while x < c.width && (0..c.height - 30).any(|y| c.pixel(x, y) == colour) {
                        x += 1;
                    }
                }
                x += 1;
            }
            heights
        };
        let one = height_of(PALETTE[0]);
        let two = height_of(PALETTE[1]);
        assert_eq!(one.len(), 2, "two bars of the first series");
        assert_eq!(two.len(), 1, "the missing value draws no bar");
        assert_eq!(one[0], 2 * one[1]);
        assert_eq!(one[0], 5 * two[0]);
    }

    #[test]
    fn numbers_are_short_and_axes_round() {
        assert_eq!(short_number(1234.0), "1.2K");
        assert_eq!(short_number(12_600.0), "12.6K");
        assert_eq!(short_number(2_000_000.0), "2M");
        assert_eq!(short_number(0.25), "0.25");
        assert_eq!(short_number(42.0), "42");
        assert_eq!(nice_ceiling(7_300.0), 10_000.0);
        assert_eq!(nice_ceiling(180.0), 200.0);
        assert_eq!(nice_ceiling(0.0), 1.0);
    }
}
