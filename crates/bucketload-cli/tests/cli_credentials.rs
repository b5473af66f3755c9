//! Credentials from the sources ML jobs on AWS use, with no AWS_ACCESS_KEY_ID set: a
//! container credentials endpoint (ECS, EKS Pod Identity) and a profile's credential_process,
//! against the embedded server started with keys only those sources hand out.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Fixture, Run};

/// Keys the embedded server accepts; nothing but the source under test knows them.
const KEY: &str = "AKIDFROMSOURCE";
const SECRET: &str = "secret-from-the-credential-source";

fn fixture() -> Fixture {
    Fixture::start_with(|b| b.with_credentials(KEY, SECRET))
}

/// The fixture's command without any keys in the environment.
fn keyless(fx: &Fixture) -> Command {
    let mut cmd = fx.command();
    cmd.env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY");
    cmd
}

fn run(mut cmd: Command, args: &[&str]) -> Run {
    Run::from(cmd.args(args).output().unwrap())
}

/// A bucket on the fixture's server, created with the server's keys.
fn bucket(fx: &Fixture) -> String {
    let bucket = bucketload_test_support::unique_bucket();
    let config = bucketload_test_support::s3_config(&fx.endpoint(), KEY, SECRET);
    fx.block_on(bucketload_test_support::create_bucket(&config, &bucket));
    bucket
}

/// A container credentials endpoint on loopback: answers every GET with `body` and records
/// each request's Authorization header.
struct CredentialsEndpoint {
    url: String,
    authorizations: Arc<Mutex<Vec<String>>>,
}

impl CredentialsEndpoint {
    fn start(body: String) -> CredentialsEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/credentials", listener.local_addr().unwrap());
        let authorizations = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&authorizations);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut auth = String::new();
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                    if let Some((name, value)) = line.split_once(':')
                        && name.eq_ignore_ascii_case("authorization")
                    {
                        auth = value.trim().to_owned();
                    }
                    line.clear();
                }
                seen.lock().unwrap().push(auth);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        CredentialsEndpoint {
            url,
            authorizations,
        }
    }

    fn authorizations(&self) -> Vec<String> {
        self.authorizations.lock().unwrap().clone()
    }
}

fn container_json(expiration: &str) -> String {
    format!(
        r#"{{"AccessKeyId":"{KEY}","SecretAccessKey":"{SECRET}","Token":"session-token","Expiration":"{expiration}"}}"#
    )
}

#[test]
fn container_credentials_from_full_uri_with_token() {
    let fx = fixture();
    let bucket = bucket(&fx);
    let endpoint = CredentialsEndpoint::start(container_json("2099-01-01T00:00:00Z"));
    let token_file = fx.work_path("eks-token");
    std::fs::write(&token_file, "eks-pod-identity-token\n").unwrap();
    for name in ["a.bin", "b.bin", "c.bin"] {
        std::fs::write(fx.work_path(name), name).unwrap();
    }
    let with_container = || {
        let mut cmd = keyless(&fx);
        cmd.env("AWS_CONTAINER_CREDENTIALS_FULL_URI", &endpoint.url)
            .env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", &token_file);
        cmd
    };
    let dest = format!("s3://{bucket}/data/");
    for name in ["a.bin", "b.bin", "c.bin"] {
        run(with_container(), &["cp", name, &dest]).ok();
    }
    let ls = run(with_container(), &["ls", &dest]).ok();
    for name in ["a.bin", "b.bin", "c.bin"] {
        assert!(ls.stdout.contains(name), "{ls:#?}");
    }
    // Each process fetched once and signed all its requests with what it got.
    let auths = endpoint.authorizations();
    assert_eq!(auths.len(), 4, "one fetch per process: {auths:?}");
    assert!(
        auths.iter().all(|a| a == "eks-pod-identity-token"),
        "{auths:?}"
    );

    // ECS: the token in AWS_CONTAINER_AUTHORIZATION_TOKEN itself.
    let mut cmd = keyless(&fx);
    cmd.env("AWS_CONTAINER_CREDENTIALS_FULL_URI", &endpoint.url)
        .env("AWS_CONTAINER_AUTHORIZATION_TOKEN", "Basic ecs-token");
    run(cmd, &["ls", &dest]).ok();
    assert_eq!(endpoint.authorizations().last().unwrap(), "Basic ecs-token");
}

#[test]
fn container_full_uri_on_another_host_is_refused_without_trying_instance_metadata() {
    let fx = fixture();
    let bucket = bucket(&fx);
    let mut cmd = keyless(&fx);
    cmd.env(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "http://10.255.255.1/creds",
    );
    let started = Instant::now();
    let r = run(cmd, &["ls", &format!("s3://{bucket}/")]);
    assert_eq!(r.code, 4, "{r:#?}");
    let line = r.error_line();
    assert!(
        line.contains(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI `http://10.255.255.1/creds` is plain http"
        ),
        "{line}"
    );
    assert_eq!(r.stderr.lines().count(), 1, "{r:#?}");
    assert!(started.elapsed() < Duration::from_secs(30), "{r:#?}");
}

/// Writes `~/.aws/config` of the fixture's home with `text`.
fn aws_config(fx: &Fixture, text: &str) {
    let dir = fx.work_path(".aws");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config"), text).unwrap();
}

/// A credential_process script that appends a line to `calls` on every run and prints the
/// server's keys, expiring at `expiration`.
fn process_script(fx: &Fixture, expiration: &str) -> (String, std::path::PathBuf) {
    let calls = fx.work_path("calls");
    let script = fx.work_path("creds.sh");
    std::fs::write(
        &script,
        format!(
            "echo run >> '{}'\nprintf '%s' '{{\"Version\": 1, \"AccessKeyId\": \"{KEY}\", \
             \"SecretAccessKey\": \"{SECRET}\", \"SessionToken\": \"tok\", \
             \"Expiration\": \"{expiration}\"}}'\n",
            calls.display()
        ),
    )
    .unwrap();
    (format!("sh {}", script.display()), calls)
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn credential_process_of_the_profile_signs_every_request() {
    let fx = fixture();
    let bucket = bucket(&fx);
    let (command, calls) = process_script(&fx, "2099-01-01T00:00:00Z");
    aws_config(
        &fx,
        &format!("[profile train]\ncredential_process = {command}\nregion = us-east-1\n"),
    );
    std::fs::create_dir(fx.work_path("shards")).unwrap();
    for i in 0..4 {
        std::fs::write(
            fx.work_path(&format!("shards/{i}.tar")),
            vec![i as u8; 1000],
        )
        .unwrap();
    }
    let dest = format!("s3://{bucket}/shards/");
    let mut cmd = keyless(&fx);
    cmd.env("AWS_PROFILE", "train");
    run(cmd, &["cp", "-r", "shards", &dest]).ok();
    assert_eq!(lines(&calls), 1, "cached for the whole run");
    let r = run(keyless(&fx), &["--profile", "train", "ls", &dest]).ok();
    assert!(r.stdout.contains("3.tar"), "{r:#?}");
    assert_eq!(lines(&calls), 2);
}

#[test]
fn a_failing_credential_process_is_a_credentials_error_naming_it() {
    let fx = fixture();
    let bucket = bucket(&fx);
    aws_config(
        &fx,
        "[default]\ncredential_process = sh -c 'echo \"token expired: run corp-login\" >&2; exit 3'\n",
    );
    let started = Instant::now();
    let r = run(keyless(&fx), &["ls", &format!("s3://{bucket}/")]);
    assert_eq!(r.code, 4, "{r:#?}");
    let line = r.error_line();
    assert!(
        line.contains("credential_process `sh -c 'echo \"token expired: run corp-login\" >&2; exit 3'` exited 3: token expired: run corp-login"),
        "{line}"
    );
    assert_eq!(r.stderr.lines().count(), 1, "{r:#?}");
    assert!(started.elapsed() < Duration::from_secs(30), "{r:#?}");

    aws_config(
        &fx,
        "[profile corp]\nsso_session = corp\nsso_account_id = 111122223333\nsso_role_name = ml\n",
    );
    let r = run(
        keyless(&fx),
        &["--profile", "corp", "ls", &format!("s3://{bucket}/")],
    );
    assert_eq!(r.code, 4, "{r:#?}");
    assert!(
        r.error_line()
            .contains("run `aws configure export-credentials --profile corp --format env`"),
        "{r:#?}"
    );
}

#[test]
fn a_profile_that_does_not_exist_is_named_instead_of_asking_instance_metadata() {
    let fx = fixture();
    let bucket = bucket(&fx);
    aws_config(&fx, "[profile train]\nregion = us-east-1\n");
    let r = run(
        keyless(&fx),
        &["--profile", "trian", "ls", &format!("s3://{bucket}/")],
    );
    assert_eq!(r.code, 4, "{r:#?}");
    let line = r.error_line();
    assert!(
        line.contains("profile `trian` is in neither the config file"),
        "{line}"
    );
    assert!(line.contains("check --profile/AWS_PROFILE"), "{line}");
}

/// Sets up moto's IAM through boto3 with auth off: a bucket, a user `trainer` allowed only
/// sts:AssumeRole, and a role `reader` it may assume that is allowed s3:*. Then makes moto
/// check signatures and permissions of every request after the first `unchecked` ones.
/// Prints the user's keys and the role's ARN as JSON.
const MOTO_IAM: &str = r#"
import json, sys, boto3, urllib.request
endpoint, bucket, unchecked = sys.argv[1], sys.argv[2], sys.argv[3]
kw = dict(endpoint_url=endpoint, region_name="us-east-1",
          aws_access_key_id="testing", aws_secret_access_key="testing")
iam = boto3.client("iam", **kw)
boto3.client("s3", **kw).create_bucket(Bucket=bucket)
allow = lambda action: json.dumps({"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": action, "Resource": "*"}]})
user = iam.create_user(UserName="trainer")["User"]
iam.put_user_policy(UserName="trainer", PolicyName="assume", PolicyDocument=allow("sts:AssumeRole"))
key = iam.create_access_key(UserName="trainer")["AccessKey"]
trust = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
    "Principal": {"AWS": user["Arn"]}, "Action": "sts:AssumeRole"}]})
role = iam.create_role(RoleName="reader", AssumeRolePolicyDocument=trust)["Role"]
iam.put_role_policy(RoleName="reader", PolicyName="s3", PolicyDocument=allow("s3:*"))
urllib.request.urlopen(urllib.request.Request(endpoint + "/moto-api/reset-auth",
    data=unchecked.encode(), method="POST", headers={"Content-Type": "text/plain"})).read()
print(json.dumps({"key": key["AccessKeyId"], "secret": key["SecretAccessKey"], "role": role["Arn"]}))
"#;

/// Lists `bucket` with auth off again: the keys stored.
const MOTO_LIST: &str = r#"
import sys, boto3, urllib.request
endpoint, bucket = sys.argv[1], sys.argv[2]
urllib.request.urlopen(urllib.request.Request(endpoint + "/moto-api/reset-auth",
    data=b"inf", method="POST", headers={"Content-Type": "text/plain"})).read()
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id="testing", aws_secret_access_key="testing")
print(" ".join(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])))
"#;

fn python(script: &str, args: &[&str]) -> String {
    bucketload_test_support::run_python(script, args)
        .trim()
        .to_owned()
}

/// moto with IAM set up (see [`MOTO_IAM`]): the server, a scratch home, the trainer's keys
/// and the role's ARN.
struct MotoIam {
    moto: bucketload_test_support::MotoServer,
    home: tempfile::TempDir,
    bucket: String,
    key: String,
    secret: String,
    role: String,
}

impl MotoIam {
    fn start(unchecked: u32) -> MotoIam {
        let moto = bucketload_test_support::MotoServer::start();
        let bucket = bucketload_test_support::unique_bucket();
        let out = python(
            MOTO_IAM,
            &[moto.endpoint(), &bucket, &unchecked.to_string()],
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let field = |k: &str| v[k].as_str().unwrap().to_owned();
        MotoIam {
            home: tempfile::tempdir().unwrap(),
            bucket,
            key: field("key"),
            secret: field("secret"),
            role: field("role"),
            moto,
        }
    }

    /// The binary with only the endpoints in the environment (no keys).
    fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bucketload"));
        for (key, _) in std::env::vars() {
            if key.starts_with("AWS_") || key == "RUST_LOG" {
                cmd.env_remove(key);
            }
        }
        cmd.env("HOME", self.home.path())
            .env("AWS_ENDPOINT_URL", self.moto.endpoint())
            .env("AWS_ENDPOINT_URL_STS", self.moto.endpoint())
            .env("AWS_REGION", "us-east-1")
            .current_dir(self.home.path());
        cmd
    }

    fn keys_stored(&self) -> String {
        python(MOTO_LIST, &[self.moto.endpoint(), &self.bucket])
    }
}

#[test]
fn assume_role_profile_with_source_profile_on_moto() {
    let m = MotoIam::start(0);
    let aws = m.home.path().join(".aws");
    std::fs::create_dir(&aws).unwrap();
    std::fs::write(
        aws.join("config"),
        format!(
            "[profile trainer]\naws_access_key_id = {}\naws_secret_access_key = {}\n\
             [profile ml]\nrole_arn = {}\nsource_profile = trainer\n\
             role_session_name = train-job\nduration_seconds = 900\n",
            m.key, m.secret, m.role
        ),
    )
    .unwrap();
    std::fs::write(m.home.path().join("w.bin"), "weights").unwrap();
    let uri = format!("s3://{}/ckpt/w.bin", m.bucket);
    let mut cmd = m.command();
    cmd.env("AWS_PROFILE", "ml");
    run(cmd, &["cp", "w.bin", &uri]).ok();
    let r = run(m.command(), &["--profile", "ml", "ls", &uri]).ok();
    assert!(r.stdout.contains("w.bin"), "{r:#?}");
    // moto checks every signature: the trainer's own keys may only assume the role, so the
    // requests above were signed with the role's temporary credentials.
    let r = run(m.command(), &["--profile", "trainer", "ls", &uri]);
    assert_eq!(r.code, 4, "{r:#?}");
    assert!(r.stderr.contains("AccessDenied"), "{r:#?}");
    assert_eq!(m.keys_stored(), "ckpt/w.bin");
}

#[test]
fn assume_role_refused_by_sts_names_the_role() {
    let m = MotoIam::start(0);
    let aws = m.home.path().join(".aws");
    std::fs::create_dir(&aws).unwrap();
    std::fs::write(
        aws.join("config"),
        format!(
            "[default]\nrole_arn = {}\nsource_profile = wrong\n\
             [profile wrong]\naws_access_key_id = AKIDNOTINIAM\naws_secret_access_key = x\n",
            m.role
        ),
    )
    .unwrap();
    let r = run(m.command(), &["ls", &format!("s3://{}/", m.bucket)]);
    assert_eq!(r.code, 4, "{r:#?}");
    let line = r.error_line();
    assert!(
        line.contains(&format!(
            "AssumeRole for {} at {} failed: InvalidClientTokenId",
            m.role,
            m.moto.endpoint()
        )),
        "{line}"
    );
}

#[test]
fn web_identity_from_the_environment_on_moto() {
    // The first request, AssumeRoleWithWebIdentity, is unsigned by design; moto checks the
    // signatures and permissions of all that follow.
    let m = MotoIam::start(1);
    let token = m.home.path().join("token");
    std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.pod-token.sig\n").unwrap();
    std::fs::create_dir(m.home.path().join("shards")).unwrap();
    for i in 0..3 {
        std::fs::write(m.home.path().join(format!("shards/{i}.tar")), [i; 100]).unwrap();
    }
    let mut cmd = m.command();
    cmd.env("AWS_WEB_IDENTITY_TOKEN_FILE", &token)
        .env("AWS_ROLE_ARN", &m.role)
        .env("AWS_ROLE_SESSION_NAME", "pod-7");
    run(
        cmd,
        &["cp", "-r", "shards", &format!("s3://{}/shards/", m.bucket)],
    )
    .ok();
    assert_eq!(m.keys_stored(), "shards/0.tar shards/1.tar shards/2.tar");
}
