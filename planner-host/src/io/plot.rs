//! The training loss curve as an SVG (`plotters`, SVG backend, no system fonts: the text is
//! SVG `<text>` that the viewer renders).

use plotters::prelude::*;

/// Errors of drawing a curve.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The curve has no finite loss to draw.
    #[error("no finite loss to plot")]
    Empty,
    /// The drawing backend failed.
    #[error("drawing the loss curve: {0}")]
    Draw(String),
}

/// A run's losses: one per training step, and one mean per epoch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LossCurve {
    /// The global index of the first step in `step_losses` (non-zero for a resumed run).
    pub first_step: usize,
    /// Each step's loss, in order.
    pub step_losses: Vec<f32>,
    /// Each epoch's end as `(steps completed so far, counted from 0 like first_step, mean loss
    /// of that epoch)`.
    pub epoch_means: Vec<(usize, f64)>,
}

impl LossCurve {
    /// An empty curve whose first step has global index `first_step`.
    pub fn starting_at(first_step: usize) -> LossCurve {
        LossCurve {
            first_step,
            ..LossCurve::default()
        }
    }

    /// The curve as CSV: a header `step,loss,epoch_mean`, then one row per step (its global
    /// index and loss; at an epoch's last step, that epoch's mean too). Kept next to a
    /// checkpoint so a resumed run draws the whole curve.
    pub fn to_csv(&self) -> String {
        let mut out = String::from("step,loss,epoch_mean\n");
        for (i, loss) in self.step_losses.iter().enumerate() {
            let step = self.first_step + i;
            let mean = self
                .epoch_means
                .iter()
                .find(|(end, _)| *end == step + 1)
                .map(|(_, m)| m.to_string())
                .unwrap_or_default();
            out.push_str(&format!("{step},{loss},{mean}\n"));
        }
        out
    }

    /// Reads [`LossCurve::to_csv`]'s form back.
    ///
    /// # Errors
    /// A message naming the first row that is not `step,loss[,mean]` with consecutive steps.
    pub fn from_csv(text: &str) -> Result<LossCurve, String> {
        let mut reader = csv::ReaderBuilder::new()
            .flexible(true)
            .from_reader(text.as_bytes());
        let mut curve = LossCurve::default();
        for (row, record) in reader.records().enumerate() {
            let record = record.map_err(|e| format!("row {}: {e}", row + 2))?;
            let bad = || format!("row {}: expected step,loss[,epoch_mean]", row + 2);
            let step: usize = record.get(0).and_then(|v| v.parse().ok()).ok_or_else(bad)?;
            let loss: f32 = record.get(1).and_then(|v| v.parse().ok()).ok_or_else(bad)?;
            if row == 0 {
                curve.first_step = step;
            } else if step != curve.first_step + row {
                return Err(format!("row {}: step {step} is not consecutive", row + 2));
            }
            curve.step_losses.push(loss);
            if let Some(v) = record.get(2).filter(|v| !v.is_empty()) {
                let mean: f64 = v.parse().map_err(|_| bad())?;
                curve.epoch_means.push((step + 1, mean));
            }
        }
        Ok(curve)
    }

    /// The global index one past the last step.
    pub fn end_step(&self) -> usize {
        self.first_step + self.step_losses.len()
    }

    /// The curve cut back to end at global step `end_step`, which must be one of its epoch
    /// ends (or its start): `None` when it is not, or lies outside the curve. A resumed run uses
    /// it to drop the epochs recorded after its checkpoint (docs/checkpoints.md).
    pub fn truncated_to(&self, end_step: usize) -> Option<LossCurve> {
        let keep = end_step.checked_sub(self.first_step)?;
        if keep > self.step_losses.len()
            || (keep > 0 && !self.epoch_means.iter().any(|&(end, _)| end == end_step))
        {
            return None;
        }
        Some(LossCurve {
            first_step: self.first_step,
            step_losses: self.step_losses[..keep].to_vec(),
            epoch_means: self
                .epoch_means
                .iter()
                .copied()
                .filter(|&(end, _)| end <= end_step)
                .collect(),
        })
    }

    /// Records one step's loss.
    pub fn push_step(&mut self, loss: f32) {
        self.step_losses.push(loss);
    }

    /// Records the end of an epoch whose steps are the last `steps` pushed.
    pub fn end_epoch(&mut self, steps: usize) {
        let n = self.step_losses.len();
        let tail = &self.step_losses[n - steps.min(n)..];
        let mean = tail.iter().map(|&l| f64::from(l)).sum::<f64>() / tail.len().max(1) as f64;
        self.epoch_means.push((self.first_step + n, mean));
    }

    /// The curve as an SVG document of `width_px × height_px` pixels: the per-step loss as a
    /// thin line, the epoch means as a thick line with markers at each epoch's last step.
    /// Non-finite losses are left out.
    ///
    /// # Errors
    /// [`PlotError::Empty`] when no loss is finite; [`PlotError::Draw`] if plotters fails.
    pub fn to_svg(&self, title: &str, width_px: u32, height_px: u32) -> Result<String, PlotError> {
        let steps: Vec<(f64, f64)> = self
            .step_losses
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_finite())
            .map(|(i, &l)| ((self.first_step + i + 1) as f64, f64::from(l)))
            .collect();
        let epochs: Vec<(f64, f64)> = self
            .epoch_means
            .iter()
            .filter(|(_, m)| m.is_finite())
            .map(|&(s, m)| (s as f64, m))
            .collect();
        let ys = steps.iter().chain(&epochs).map(|&(_, y)| y);
        let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), y| {
            (lo.min(y), hi.max(y))
        });
        if !lo.is_finite() {
            return Err(PlotError::Empty);
        }
        let pad = ((hi - lo) * 0.05).max(1e-3);
        let (y0, y1) = (
            (lo - pad).max(if lo >= 0.0 { 0.0 } else { f64::MIN }),
            hi + pad,
        );
        let x0 = self.first_step as f64;
        let x1 = (self.first_step + self.step_losses.len()).max(self.first_step + 1) as f64;

        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (width_px, height_px)).into_drawing_area();
            let draw = |e: &dyn std::fmt::Display| PlotError::Draw(e.to_string());
            root.fill(&WHITE).map_err(|e| draw(&e))?;
            let mut chart = ChartBuilder::on(&root)
                .caption(title, ("sans-serif", 20))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(56)
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(|e| draw(&e))?;
            chart
                .configure_mesh()
                .x_desc("training step")
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_desc("loss")
                .light_line_style(RGBColor(235, 235, 235))
                .draw()
                .map_err(|e| draw(&e))?;
            let step_color = RGBColor(120, 160, 210);
            chart
                .draw_series(LineSeries::new(steps, step_color.stroke_width(1)))
                .map_err(|e| draw(&e))?
                .label("loss per step")
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], step_color.stroke_width(1))
                });
            let epoch_color = RGBColor(200, 60, 40);
            chart
                .draw_series(LineSeries::new(epochs, epoch_color.stroke_width(3)).point_size(4))
                .map_err(|e| draw(&e))?
                .label("epoch mean")
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], epoch_color.stroke_width(3))
                });
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(|e| draw(&e))?;
            root.present().map_err(|e| draw(&e))?;
        }
        Ok(svg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_round_trips_and_refuses_gaps() {
        let mut c = LossCurve::starting_at(10);
        for l in [2.5f32, 1.25, 0.75, 0.5] {
            c.push_step(l);
        }
        c.end_epoch(2);
        c.push_step(0.25);
        c.end_epoch(3);
        let back = LossCurve::from_csv(&c.to_csv()).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.end_step(), 15);
        let gap = "step,loss,epoch_mean\n3,1.0,\n5,0.5,\n";
        assert!(LossCurve::from_csv(gap)
            .unwrap_err()
            .contains("not consecutive"));
        assert!(LossCurve::from_csv("step,loss\nx,1\n").is_err());
    }

    #[test]
    fn truncates_only_at_an_epoch_end() {
        let mut c = LossCurve::starting_at(10);
        c.push_step(2.5);
        c.push_step(1.25);
        c.end_epoch(2);
        for l in [0.75f32, 0.5, 0.25] {
            c.push_step(l);
        }
        c.end_epoch(3);
        let first = c.truncated_to(12).unwrap();
        assert_eq!(first.step_losses, vec![2.5, 1.25]);
        assert_eq!(first.epoch_means, vec![(12, c.epoch_means[0].1)]);
        assert_eq!(c.truncated_to(15), Some(c.clone()));
        assert_eq!(c.truncated_to(10).unwrap().end_step(), 10);
        for mid_or_outside in [9, 11, 13, 16] {
            assert_eq!(c.truncated_to(mid_or_outside), None, "{mid_or_outside}");
        }
    }

    #[test]
    fn draws_steps_and_epoch_means() {
        let mut c = LossCurve::starting_at(0);
        for e in 0..3 {
            for i in 0..10 {
                c.push_step(2.0 / (1.0 + (e * 10 + i) as f32 * 0.1));
            }
            c.end_epoch(10);
        }
        assert_eq!(c.epoch_means.len(), 3);
        assert_eq!(c.epoch_means[2].0, 30);
        let svg = c.to_svg("test", 640, 400).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
        assert!(svg.contains("polyline"));
        assert!(svg.contains("epoch mean"));
        assert!(svg.contains("training step"));
    }

    #[test]
    fn non_finite_losses_are_skipped_and_all_non_finite_is_an_error() {
        let mut c = LossCurve::starting_at(5);
        c.push_step(f32::NAN);
        c.end_epoch(1);
        assert!(matches!(c.to_svg("t", 100, 100), Err(PlotError::Empty)));
        c.push_step(1.0);
        c.push_step(f32::INFINITY);
        c.end_epoch(2);
        assert!(c.to_svg("t", 320, 240).is_ok());
    }
}
