//! Compiles `csrc/jpeg_region.c`, the region decoder over libjpeg-turbo's libjpeg API, and
//! links the system libjpeg-turbo (Debian: `libjpeg62-turbo-dev`, installed by
//! `scripts/setup.sh`).

fn main() {
    println!("cargo:rerun-if-changed=csrc/jpeg_region.c");
    let library = match pkg_config::Config::new()
        .atleast_version("2.0")
        .probe("libjpeg")
    {
        Ok(library) => library,
        Err(e) => {
            println!(
                "cargo:warning=libjpeg-turbo >= 2.0 not found by pkg-config ({e}); \
                 install libjpeg62-turbo-dev (scripts/setup.sh does)"
            );
            std::process::exit(1);
        }
    };
    let mut build = cc::Build::new();
    build.file("csrc/jpeg_region.c").opt_level(2).warnings(true);
    for path in &library.include_paths {
        build.include(path);
    }
    build.compile("bucketload_jpeg_region");
}
