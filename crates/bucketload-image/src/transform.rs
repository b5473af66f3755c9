//! Augmentations: which crop, size and flip each sample gets, and what its pixels become.
//!
//! [`Augment`] holds the settings; [`Augment::plan`] draws one sample's parameters from its
//! [`SampleRng`] with torchvision's algorithms (`RandomResizedCrop.get_params`: ten attempts,
//! then a centre crop clamped to the ratio range; `Resize` of the shorter side;
//! `CenterCrop`'s rounding; `RandomHorizontalFlip`) and returns a [`ResamplePlan`] that the
//! fused kernel executes.

use crate::error::{Error, Result};
use crate::resample::{CropBox, ResamplePlan};
use crate::rng::SampleRng;

/// ImageNet channel means (R, G, B) of pixels scaled to [0, 1].
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet channel standard deviations (R, G, B) of pixels scaled to [0, 1].
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// The geometric part of an augmentation.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Geometry {
    /// torchvision's `RandomResizedCrop(size, scale, ratio)`: a random box of `scale` of the
    /// area and aspect ratio in `ratio` (drawn log-uniformly), resized to `size`.
    RandomResizedCrop {
        /// Output (height, width).
        size: (u32, u32),
        /// Range of the box's share of the image area; torchvision's default (0.08, 1.0).
        scale: (f64, f64),
        /// Range of the box's width / height; torchvision's default (3/4, 4/3).
        ratio: (f64, f64),
    },
    /// torchvision's `Resize(shorter)` followed by `CenterCrop(crop)`: the evaluation
    /// transform.
    ResizeCenterCrop {
        /// Length the shorter side is resized to (the longer keeps the aspect ratio).
        shorter: u32,
        /// Output (height, width), at most `shorter` on each side.
        crop: (u32, u32),
    },
}

impl Geometry {
    /// `RandomResizedCrop(size)` with torchvision's default scale and ratio ranges.
    pub fn random_resized_crop(size: u32) -> Geometry {
        Geometry::RandomResizedCrop {
            size: (size, size),
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
        }
    }

    /// Output (height, width).
    pub fn output_size(&self) -> (u32, u32) {
        match *self {
            Geometry::RandomResizedCrop { size, .. } => size,
            Geometry::ResizeCenterCrop { crop, .. } => crop,
        }
    }

    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let (h, w) = self.output_size();
        if h == 0 || w == 0 {
            problems.push(format!("output size {h}x{w} must be positive"));
        }
        match *self {
            Geometry::RandomResizedCrop { scale, ratio, .. } => {
                if !(scale.0 > 0.0 && scale.0 <= scale.1 && scale.1 <= 1.0) {
                    problems.push(format!("scale {scale:?} must satisfy 0 < low <= high <= 1"));
                }
                if !(ratio.0 > 0.0 && ratio.0 <= ratio.1 && ratio.1.is_finite()) {
                    problems.push(format!("ratio {ratio:?} must satisfy 0 < low <= high"));
                }
            }
            Geometry::ResizeCenterCrop { shorter, crop, .. } => {
                if crop.0 > shorter || crop.1 > shorter {
                    problems.push(format!(
                        "centre crop {crop:?} is larger than the resize {shorter}"
                    ));
                }
            }
        }
        problems
    }
}

/// What becomes of each decoded image.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Augment {
    /// Crop and resize.
    pub geometry: Geometry,
    /// Probability of a horizontal flip (torchvision's `RandomHorizontalFlip(p)`); 0 disables.
    pub flip: f64,
    /// Widen the filter when shrinking (torchvision's `antialias`); the workshop pipeline
    /// uses `false`.
    pub antialias: bool,
}

impl Augment {
    /// Every problem with these settings (empty when valid).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = self.geometry.problems();
        if !(0.0..=1.0).contains(&self.flip) {
            problems.push(format!("flip probability {} must lie in [0, 1]", self.flip));
        }
        problems
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<()> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::InvalidConfig { problems })
        }
    }

    /// The plan of one sample of a `width` x `height` image, drawing from `rng` (crop
    /// parameters first, then the flip).
    pub fn plan(&self, width: u32, height: u32, rng: &mut SampleRng) -> ResamplePlan {
        let (crop, resized, window) = match self.geometry {
            Geometry::RandomResizedCrop { size, scale, ratio } => {
                let crop = random_resized_crop_box(width, height, scale, ratio, rng);
                (crop, size, (0, 0))
            }
            Geometry::ResizeCenterCrop { shorter, crop } => {
                let resized = resized_shorter(width, height, shorter);
                let whole = CropBox {
                    x: 0,
                    y: 0,
                    width,
                    height,
                };
                (whole, resized, centre_window(resized, crop))
            }
        };
        let flip = self.flip > 0.0 && rng.next_f64() < self.flip;
        ResamplePlan {
            crop,
            resized,
            window,
            output: self.geometry.output_size(),
            flip,
            antialias: self.antialias,
        }
    }
}

/// torchvision's `RandomResizedCrop.get_params`.
pub fn random_resized_crop_box(
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
    rng: &mut SampleRng,
) -> CropBox {
    let area = f64::from(width) * f64::from(height);
    let log_ratio = (ratio.0.ln(), ratio.1.ln());
    // torchvision's number of attempts before the centre-crop fallback.
    for _ in 0..10 {
        let target_area = area * rng.uniform(scale.0, scale.1);
        let aspect = rng.uniform(log_ratio.0, log_ratio.1).exp();
        let w = round_half_even((target_area * aspect).sqrt());
        let h = round_half_even((target_area / aspect).sqrt());
        if 0.0 < w && w <= f64::from(width) && 0.0 < h && h <= f64::from(height) {
            // In range by the check above.
            let (w, h) = (w as u32, h as u32);
            let y = rng.below(u64::from(height - h) + 1) as u32;
            let x = rng.below(u64::from(width - w) + 1) as u32;
            return CropBox {
                x,
                y,
                width: w,
                height: h,
            };
        }
    }
    centre_fallback(width, height, ratio)
}

fn centre_fallback(width: u32, height: u32, ratio: (f64, f64)) -> CropBox {
    let in_ratio = f64::from(width) / f64::from(height);
    let (w, h) = if in_ratio < ratio.0 {
        (
            width,
            (round_half_even(f64::from(width) / ratio.0) as u32).clamp(1, height),
        )
    } else if in_ratio > ratio.1 {
        (
            (round_half_even(f64::from(height) * ratio.1) as u32).clamp(1, width),
            height,
        )
    } else {
        (width, height)
    };
    CropBox {
        x: (width - w) / 2,
        y: (height - h) / 2,
        width: w,
        height: h,
    }
}

/// torchvision's `Resize(shorter)` output (height, width): the shorter side becomes
/// `shorter`, the longer `int(shorter * long / short)`.
pub fn resized_shorter(width: u32, height: u32, shorter: u32) -> (u32, u32) {
    let (short, long) = if width <= height {
        (width, height)
    } else {
        (height, width)
    };
    let new_long = (f64::from(shorter) * f64::from(long) / f64::from(short)) as u32;
    if width <= height {
        (new_long, shorter)
    } else {
        (shorter, new_long)
    }
}

/// torchvision's `CenterCrop` offsets (top, left) of a `crop` window in a `size` image.
fn centre_window(size: (u32, u32), crop: (u32, u32)) -> (u32, u32) {
    let offset = |full: u32, part: u32| round_half_even(f64::from(full - part) / 2.0) as u32;
    (offset(size.0, crop.0), offset(size.1, crop.1))
}

/// Python's `round`: halves go to the even neighbour.
fn round_half_even(v: f64) -> f64 {
    let r = v.round();
    if (v - v.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - v.signum()
    } else {
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_rounding() {
        assert_eq!(round_half_even(0.5), 0.0);
        assert_eq!(round_half_even(1.5), 2.0);
        assert_eq!(round_half_even(2.5), 2.0);
        assert_eq!(round_half_even(2.6), 3.0);
    }

    #[test]
    fn resize_shorter_side_like_torchvision() {
        assert_eq!(resized_shorter(500, 375, 256), (256, 341));
        assert_eq!(resized_shorter(375, 500, 256), (341, 256));
        assert_eq!(centre_window((256, 341), (224, 224)), (16, 58));
    }

    #[test]
    fn crops_stay_inside_and_respect_ranges() {
        let (scale, ratio) = ((0.08, 1.0), (0.75, 4.0 / 3.0));
        for index in 0..2000 {
            let mut rng = SampleRng::new(7, 0, index);
            let b = random_resized_crop_box(500, 375, scale, ratio, &mut rng);
            assert!(b.x + b.width <= 500 && b.y + b.height <= 375, "{b:?}");
            let share = f64::from(b.width * b.height) / (500.0 * 375.0);
            assert!(share > 0.07 && share <= 1.0, "{b:?}");
        }
    }

    #[test]
    fn impossible_ratio_falls_back_to_the_centre() {
        // A 1000x10 strip cannot hold a box of ratio <= 4/3 and >= 8% of the area.
        let mut rng = SampleRng::new(0, 0, 0);
        let b = random_resized_crop_box(1000, 10, (0.08, 1.0), (0.75, 4.0 / 3.0), &mut rng);
        assert_eq!(
            b,
            CropBox {
                x: 493,
                y: 0,
                width: 13,
                height: 10
            }
        );
    }

    #[test]
    fn invalid_settings_are_all_reported() {
        let augment = Augment {
            geometry: Geometry::ResizeCenterCrop {
                shorter: 100,
                crop: (224, 0),
            },
            flip: 2.0,
            antialias: false,
        };
        let problems = augment.problems();
        assert_eq!(problems.len(), 3, "{problems:?}");
    }
}
