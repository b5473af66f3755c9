//! SVG charts to PNG with resvg, text drawn in the DejaVu Sans face built into the binary (no
//! system fonts or fontconfig needed; licence in `assets/fonts/LICENSE`).

use std::sync::Arc;

use anyhow::Context as _;
use resvg::{tiny_skia, usvg};

/// DejaVu Sans 2.37 from Debian's fonts-dejavu-core.
const DEJAVU_SANS: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

/// PNG pixels per SVG pixel: sharp on high-density screens and in slides.
pub const SCALE: u32 = 2;

/// Rasterises SVG text; parses its font once.
#[derive(Debug)]
pub struct Rasterizer {
    options: usvg::Options<'static>,
}

impl Rasterizer {
    /// A rasteriser whose only font (and every generic family) is DejaVu Sans.
    pub fn new() -> Rasterizer {
        let mut fonts = usvg::fontdb::Database::new();
        fonts.load_font_data(DEJAVU_SANS.to_vec());
        fonts.set_sans_serif_family("DejaVu Sans");
        fonts.set_serif_family("DejaVu Sans");
        fonts.set_monospace_family("DejaVu Sans");
        let options = usvg::Options {
            font_family: "DejaVu Sans".into(),
            fontdb: Arc::new(fonts),
            ..usvg::Options::default()
        };
        Rasterizer { options }
    }

    /// The PNG bytes of a standalone SVG document, [`SCALE`] times its size.
    pub fn png(&self, svg: &str) -> anyhow::Result<Vec<u8>> {
        let tree =
            usvg::Tree::from_str(svg, &self.options).context("cannot parse a chart's svg")?;
        let size = tree.size().to_int_size().scale_by(SCALE as f32);
        let size = size.context("the chart is too large to rasterise")?;
        let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height())
            .context("the chart has no area to rasterise")?;
        let scale = SCALE as f32;
        resvg::render(
            &tree,
            tiny_skia::Transform::from_scale(scale, scale),
            &mut pixmap.as_mut(),
        );
        pixmap.encode_png().context("cannot encode a chart as png")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_drawn_with_the_embedded_font() {
        let svg = r##"<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"><text x="2" y="15" font-family="sans-serif" font-size="14" fill="#000000">Wg</text></svg>"##;
        let png = Rasterizer::new().png(svg).unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (80, 40));
        // Ink on a transparent background: the glyphs were found and drawn.
        assert!(buf.chunks(4).any(|px| px[3] > 0));
    }
}
