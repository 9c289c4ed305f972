//! Plain-text tables for the commands' output: columns padded to their widest cell, two
//! spaces apart.

/// The width of each column over `rows`.
pub fn widths(rows: &[Vec<String>]) -> Vec<usize> {
    let mut widths = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let w = cell.chars().count();
            match widths.get_mut(i) {
                Some(have) if *have < w => *have = w,
                Some(_) => {}
                None => widths.push(w),
            }
        }
    }
    widths
}

/// One row, padded to `widths`, without trailing spaces.
pub fn line(cells: &[String], widths: &[usize]) -> String {
    let padded: Vec<String> = cells
        .iter()
        .zip(widths.iter().chain(std::iter::repeat(&0)))
        .map(|(c, w)| format!("{c:<w$}"))
        .collect();
    padded.join("  ").trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let rows = vec![
            vec!["name".to_string(), "decision".to_string()],
            vec!["orders".to_string(), "mirror".to_string()],
        ];
        let w = widths(&rows);
        assert_eq!(w, vec![6, 8]);
        assert_eq!(line(&rows[0], &w), "name    decision");
        assert_eq!(line(&rows[1], &w), "orders  mirror");
    }
}
