//! [`on_every_backend!`](crate::on_every_backend): one test per backend from one test body.

/// Generates one `#[tokio::test]` per [`Backend`](crate::Backend) for each named body, in
/// modules `mem`, `file`, `embedded`, `moto` and `seaweed`, so a failure names its backend
/// (`embedded::put_get_head`). Each body is an `async fn(Fixture)` in the calling module;
/// the S3 backends run on a two-thread runtime. The caller depends on `tokio`.
///
/// ```ignore
/// async fn round_trip(f: bucketload_test_support::Fixture) { /* ... */ }
/// bucketload_test_support::on_every_backend!(round_trip);
/// ```
#[macro_export]
macro_rules! on_every_backend {
    ($($body:ident),* $(,)?) => {
        $crate::on_every_backend!(@one mem, Mem, [tokio::test]; $($body),*);
        $crate::on_every_backend!(@one file, File, [tokio::test]; $($body),*);
        $crate::on_every_backend!(
            @one embedded, Embedded, [tokio::test(flavor = "multi_thread", worker_threads = 2)];
            $($body),*
        );
        $crate::on_every_backend!(
            @one moto, Moto, [tokio::test(flavor = "multi_thread", worker_threads = 2)];
            $($body),*
        );
        $crate::on_every_backend!(
            @one seaweed, Seaweed, [tokio::test(flavor = "multi_thread", worker_threads = 2)];
            $($body),*
        );
    };
    (@one $module:ident, $backend:ident, [$test:meta]; $($body:ident),*) => {
        mod $module {
            $(
                #[$test]
                async fn $body() {
                    super::$body($crate::Backend::$backend.setup().await).await
                }
            )*
        }
    };
}
