//! `ShardIndex::validate`: an index that parses is checked against its shard before use.
#![allow(clippy::unwrap_used)]

use bucketload_format::{Hint, ShardIndex, ShardIndexBuilder, TarWriter};

/// A shard of three samples (`jpg` and `cls`) and its index.
fn indexed() -> (u64, ShardIndex) {
    let mut shard = Vec::new();
    let mut writer = TarWriter::new("s.tar");
    let mut index = ShardIndexBuilder::new();
    for i in 0..3 {
        for (name, data) in [
            (format!("{i}.jpg"), vec![7u8; 700]),
            (format!("{i}.cls"), vec![b'1']),
        ] {
            let at = writer.append(&mut shard, &name, &data).expect("append");
            index.add(&name, at, &data);
        }
    }
    let summary = writer.finish(&mut shard).expect("finish");
    (shard.len() as u64, index.finish(&summary))
}

fn refused(index: &ShardIndex, size: u64) -> String {
    let err = index
        .validate("s3://b/s.tar.idx", "s3://b/s.tar", size)
        .unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("s3://b/s.tar.idx: "), "{text}");
    assert!(text.contains("does not describe s3://b/s.tar"), "{text}");
    assert_eq!(err.hint(), Some(Hint::ReindexOrReshard));
    assert!(text.contains(&Hint::ReindexOrReshard.to_string()), "{text}");
    text
}

#[test]
fn a_written_index_describes_its_shard() {
    let (size, index) = indexed();
    index.validate("i", "s", size).expect("valid");
}

#[test]
fn each_bad_layout_is_refused_with_its_reason() {
    let (size, good) = indexed();
    type Craft = Box<dyn Fn(&mut ShardIndex)>;
    let cases: Vec<(&str, Craft)> = vec![
        ("out of order", Box::new(|i| i.samples[1].members.reverse())),
        ("out of order", Box::new(|i| i.samples.swap(0, 2))),
        (
            "out of order",
            Box::new(|i| i.samples[2] = i.samples[1].clone()),
        ),
        ("no members", Box::new(|i| i.samples[0].members.clear())),
        (
            "tar block",
            Box::new(|i| i.samples[0].members[1].header_offset += 1),
        ),
        (
            "inside its header",
            Box::new(|i| i.samples[0].members[0].header_offset = 512),
        ),
        (
            "past the shard",
            Box::new(|i| i.samples[2].members[1].size = u64::MAX),
        ),
        (
            "past the shard",
            Box::new(move |i| i.samples[2].members[1].data_offset = size),
        ),
    ];
    for (reason, craft) in cases {
        let mut index = good.clone();
        craft(&mut index);
        let text = refused(&index, size);
        assert!(text.contains(reason), "{reason}: {text}");
    }
}

#[test]
fn a_shard_of_another_size_is_refused_naming_both() {
    let (size, index) = indexed();
    let text = refused(&index, size + 512);
    assert!(
        text.contains(&format!(
            "a {size}-byte shard, the shard is {} bytes",
            size + 512
        )),
        "{text}"
    );
}
