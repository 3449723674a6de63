//! `multipart/form-data` bodies (RFC 7578), as KFP's upload endpoints take pipeline
//! packages: the boundary from the Content-Type, each part's `Content-Disposition` name
//! and filename, and its bytes. Only what those uploads need: no nested multiparts, no
//! transfer encodings (clients send the file as is).

/// One part of a form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Part {
    pub name: String,
    pub filename: Option<String>,
    pub data: Vec<u8>,
}

/// The boundary a `multipart/form-data; boundary=…` Content-Type names.
pub(crate) fn boundary(content_type: &str) -> Option<String> {
    let (kind, params) = content_type.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_string())
            .filter(|b| !b.is_empty())
    })
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from > haystack.len() {
        return None;
    }
    haystack[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// A `Content-Disposition` parameter (`name="uploadfile"`).
fn disposition_param(header: &str, param: &str) -> Option<String> {
    header.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case(param)
            .then(|| v.trim().trim_matches('"').to_string())
    })
}

/// The parts of a body; an error says why it is not a form.
pub(crate) fn parse(content_type: &str, body: &[u8]) -> Result<Vec<Part>, String> {
    let boundary = boundary(content_type)
        .ok_or_else(|| "request Content-Type isn't multipart/form-data".to_string())?;
    let delimiter = format!("--{boundary}");
    let delimiter = delimiter.as_bytes();
    let mut pos = find(body, delimiter, 0).ok_or("multipart: NextPart: EOF")?;
    let mut parts = Vec::new();
    loop {
        pos += delimiter.len();
        if body[pos..].starts_with(b"--") {
            return Ok(parts);
        }
        // The rest of the delimiter line (transport padding, then CRLF).
        let line_end = find(body, b"\n", pos).ok_or("multipart: NextPart: EOF")?;
        let head_start = line_end + 1;
        let (head_end, data_start) = match find(body, b"\r\n\r\n", head_start) {
            Some(i) => (i, i + 4),
            None => {
                let i = find(body, b"\n\n", head_start).ok_or("multipart: malformed part")?;
                (i, i + 2)
            }
        };
        let head = String::from_utf8_lossy(&body[head_start..head_end]).into_owned();
        let next = find(body, delimiter, data_start).ok_or("multipart: NextPart: EOF")?;
        // The CRLF before the delimiter belongs to the delimiter.
        let mut data_end = next;
        if data_end >= data_start + 2 && &body[data_end - 2..data_end] == b"\r\n" {
            data_end -= 2;
        } else if data_end > data_start && body[data_end - 1] == b'\n' {
            data_end -= 1;
        }
        let disposition = head
            .lines()
            .find(|l| {
                l.split_once(':')
                    .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("content-disposition"))
            })
            .map(|l| l.split_once(':').map(|(_, v)| v).unwrap_or_default())
            .unwrap_or_default();
        parts.push(Part {
            name: disposition_param(disposition, "name").unwrap_or_default(),
            filename: disposition_param(disposition, "filename"),
            data: body[data_start..data_end].to_vec(),
        });
        pos = next;
    }
}

/// A body of one file part, as `kfp` and `curl -F` send it (for tests and examples).
#[cfg(test)]
pub(crate) fn form(boundary: &str, field: &str, filename: &str, data: &[u8]) -> Vec<u8> {
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(data);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_come_from_the_content_type() {
        assert_eq!(
            boundary("multipart/form-data; boundary=abc123").as_deref(),
            Some("abc123")
        );
        assert_eq!(
            boundary("Multipart/Form-Data; charset=utf-8; boundary=\"q r\"").as_deref(),
            Some("q r")
        );
        assert_eq!(boundary("application/json"), None);
        assert_eq!(boundary("multipart/form-data"), None);
    }

    #[test]
    fn parts_carry_their_names_filenames_and_bytes() {
        let body = b"preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n--XyZ\r\ncontent-disposition: form-data; name=\"uploadfile\"; filename=\"p.yaml\"\r\nContent-Type: application/x-yaml\r\n\r\na: 1\r\nb: --XY\r\n\r\n--XyZ--\r\n";
        let parts = parse("multipart/form-data; boundary=XyZ", body).expect("a form");
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].name, "note");
        assert_eq!(parts[0].filename, None);
        assert_eq!(parts[0].data, b"hello");
        assert_eq!(parts[1].name, "uploadfile");
        assert_eq!(parts[1].filename.as_deref(), Some("p.yaml"));
        assert_eq!(parts[1].data, b"a: 1\r\nb: --XY\r\n");
        let built = form("b0", "uploadfile", "x.yaml", b"k: v");
        let parts = parse("multipart/form-data; boundary=b0", &built).expect("a form");
        assert_eq!(parts[0].data, b"k: v");
        assert!(parse("multipart/form-data; boundary=nope", body).is_err());
        assert!(parse("text/plain", body).is_err());
        assert!(parse("multipart/form-data; boundary=XyZ", b"--XyZ\r\nno end").is_err());
    }
}
