//! A team's configuration read at start from S3 or SSM Parameter Store, so a deployment runs its
//! own file without rebuilding: `BATON_CONFIG` (or `--config`) names `s3://bucket/folder/team.yaml`
//! or `ssm:/path/team.yaml` instead of a local file. The configuration comes with the files beside
//! it (the OpenAPI documents it names by relative path): every object under the same S3 folder, or
//! every parameter under the same SSM path, is copied into one local folder with the same layout,
//! and the configuration is then read from there like any local file. Bounded: at most
//! [`MAX_FILES`] files of at most [`MAX_BYTES`] bytes in all.

use std::path::{Component, Path, PathBuf};

use aws_config::SdkConfig;

/// The most files a configuration folder may hold.
pub(crate) const MAX_FILES: usize = 200;
/// The most bytes the files of a configuration folder may hold together.
pub(crate) const MAX_BYTES: u64 = 32 * 1024 * 1024;

/// Where a configuration is stored.
#[derive(Debug, PartialEq)]
enum Source {
    /// An S3 object: its bucket, its folder (a key prefix ending in `/`, or empty) and its name.
    S3 { bucket: String, folder: String, file: String },
    /// An SSM parameter: its path (the name up to its last `/`) and its last part.
    Ssm { path: String, file: String },
}

/// What `uri` names: `None` for a local file (anything that is not `s3://` or `ssm:`).
fn parse(uri: &str) -> Result<Option<Source>, String> {
    let split = |s: &str| match s.rsplit_once('/') {
        Some((folder, file)) => (format!("{folder}/"), file.to_owned()),
        None => (String::new(), s.to_owned()),
    };
    if let Some(rest) = uri.strip_prefix("s3://") {
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        let (folder, file) = split(key);
        if bucket.is_empty() || file.is_empty() {
            return Err(format!("{uri}: an S3 configuration is s3://<bucket>/<folder>/<file>.yaml"));
        }
        return Ok(Some(Source::S3 { bucket: bucket.into(), folder, file }));
    }
    if let Some(name) = uri.strip_prefix("ssm:") {
        let (path, file) = split(name);
        if !name.starts_with('/') || file.is_empty() || path.len() < 2 {
            return Err(format!("{uri}: an SSM configuration is ssm:/<path>/<file>.yaml"));
        }
        return Ok(Some(Source::Ssm { path: path.trim_end_matches('/').into(), file }));
    }
    Ok(None)
}

/// `config` when it is a local file (or not given); otherwise the local copy of the S3 or SSM
/// configuration it names, fetched into the process's temporary folder with the files beside it.
pub(crate) async fn localize(config: Option<&Path>) -> Result<Option<PathBuf>, String> {
    let Some(uri) = config.and_then(Path::to_str) else { return Ok(None) };
    if parse(uri)?.is_none() {
        return Ok(None);
    }
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let dir = std::env::temp_dir().join(format!("baton-config-{}", std::process::id()));
    localize_with(uri, &dir, &sdk).await.map(Some)
}

/// Fetches the configuration `uri` names and the files beside it into `dir` (emptied first) with
/// the clients of `sdk`, and returns the local path of the configuration.
pub(crate) async fn localize_with(uri: &str, dir: &Path, sdk: &SdkConfig) -> Result<PathBuf, String> {
    let source = parse(uri)?.ok_or_else(|| format!("{uri} is not an s3:// or ssm: URI"))?;
    let files = match &source {
        Source::S3 { bucket, folder, .. } => s3_files(sdk, bucket, folder).await,
        Source::Ssm { path, .. } => ssm_files(sdk, path).await,
    }
    .map_err(|e| format!("cannot read the configuration {uri}: {e}"))?;
    let file = match &source {
        Source::S3 { file, .. } | Source::Ssm { file, .. } => file,
    };
    if !files.iter().any(|(name, _)| name == file) {
        let fix = match &source {
            Source::S3 { .. } => "upload it (`aws s3 cp`) or fix ConfigBucket, ConfigPrefix and ConfigFile",
            Source::Ssm { .. } => {
                "create it (`aws ssm put-parameter`) or fix ConfigParameterPath and ConfigFile"
            }
        };
        return Err(format!("the configuration {uri} does not exist: {fix}"));
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("cannot empty {}: {e}", dir.display()))?;
    }
    for (name, body) in &files {
        let relative = Path::new(name);
        if relative.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(format!(
                "cannot read the configuration {uri}: `{name}` beside it is not a plain relative path"
            ));
        }
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, body).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(dir.join(file))
}

/// Adds one file to `files`, within the bounds.
fn add(
    files: &mut Vec<(String, Vec<u8>)>,
    total: &mut u64,
    name: String,
    body: Vec<u8>,
) -> Result<(), String> {
    *total += body.len() as u64;
    if files.len() >= MAX_FILES || *total > MAX_BYTES {
        return Err(format!("more than {MAX_FILES} files or {MAX_BYTES} bytes beside it"));
    }
    files.push((name, body));
    Ok(())
}

/// Every object under `folder` of `bucket`, named relative to it.
async fn s3_files(sdk: &SdkConfig, bucket: &str, folder: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
    use aws_sdk_s3::error::DisplayErrorContext;
    // A local endpoint (moto, MinIO) has no per-bucket host names.
    let path_style = sdk.endpoint_url().is_some() || std::env::var_os("AWS_ENDPOINT_URL_S3").is_some();
    let client = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(sdk).force_path_style(path_style).build(),
    );
    let mut pages = client.list_objects_v2().bucket(bucket).prefix(folder).into_paginator().send();
    let (mut files, mut total) = (Vec::new(), 0);
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| DisplayErrorContext(e).to_string())?;
        for object in page.contents() {
            let Some(key) = object.key() else { continue };
            let name = key.strip_prefix(folder).unwrap_or(key);
            if name.is_empty() || name.ends_with('/') {
                continue;
            }
            let got = client.get_object().bucket(bucket).key(key).send().await;
            let body = got.map_err(|e| format!("{key}: {}", DisplayErrorContext(e)))?.body.collect().await;
            let body = body.map_err(|e| format!("{key}: {e}"))?.into_bytes().to_vec();
            add(&mut files, &mut total, name.to_owned(), body)?;
        }
    }
    Ok(files)
}

/// Every parameter under `path` (decrypted), named relative to it.
async fn ssm_files(sdk: &SdkConfig, path: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
    use aws_sdk_ssm::error::DisplayErrorContext;
    let client = aws_sdk_ssm::Client::new(sdk);
    let request = client.get_parameters_by_path().path(path).recursive(true).with_decryption(true);
    let mut pages = request.into_paginator().send();
    let (mut files, mut total) = (Vec::new(), 0);
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| DisplayErrorContext(e).to_string())?;
        for parameter in page.parameters() {
            let (Some(name), Some(value)) = (parameter.name(), parameter.value()) else { continue };
            let name = name.strip_prefix(path).unwrap_or(name).trim_start_matches('/');
            add(&mut files, &mut total, name.to_owned(), value.as_bytes().to_vec())?;
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_a_folder_and_a_file_and_local_paths_are_left_alone() {
        assert_eq!(
            parse("s3://team/travel/baton.yaml").unwrap(),
            Some(Source::S3 { bucket: "team".into(), folder: "travel/".into(), file: "baton.yaml".into() })
        );
        assert_eq!(
            parse("s3://team/baton.yaml").unwrap(),
            Some(Source::S3 { bucket: "team".into(), folder: String::new(), file: "baton.yaml".into() })
        );
        assert_eq!(
            parse("ssm:/baton/travel/baton.yaml").unwrap(),
            Some(Source::Ssm { path: "/baton/travel".into(), file: "baton.yaml".into() })
        );
        assert_eq!(parse("config/team.yaml").unwrap(), None);
        for bad in ["s3://", "s3://bucket", "s3://bucket/folder/", "ssm:baton.yaml", "ssm:/baton.yaml"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    /// moto_server, which `make test` starts (the DynamoDB store's tests share it): S3 and SSM.
    async fn moto() -> SdkConfig {
        let endpoint = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect(
            "AWS_ENDPOINT_URL_DYNAMODB is not set: run the tests through `make test`, which starts moto_server",
        );
        let credentials = aws_credential_types::Credentials::new("testing", "testing", None, None, "test");
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(credentials)
            .endpoint_url(endpoint)
            .load()
            .await
    }

    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("baton-config-test-{}-{name}", std::process::id()))
    }

    #[tokio::test]
    async fn an_s3_config_arrives_with_the_files_beside_it_and_nothing_else() {
        let sdk = moto().await;
        let s3 = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&sdk).force_path_style(true).build(),
        );
        let bucket = format!("config-test-{}", fastrand::u64(..));
        s3.create_bucket().bucket(&bucket).send().await.unwrap();
        for (key, body) in [
            ("travel/team.yaml", "entry: concierge\n"),
            ("travel/openapi/hotels.json", "{\"openapi\": \"3.0.3\"}"),
            ("other/secret.yaml", "not ours"),
        ] {
            s3.put_object()
                .bucket(&bucket)
                .key(key)
                .body(body.as_bytes().to_vec().into())
                .send()
                .await
                .unwrap();
        }
        let dir = scratch("s3");
        let config = localize_with(&format!("s3://{bucket}/travel/team.yaml"), &dir, &sdk).await.unwrap();
        assert_eq!(config, dir.join("team.yaml"));
        assert_eq!(std::fs::read_to_string(&config).unwrap(), "entry: concierge\n");
        assert_eq!(
            std::fs::read_to_string(dir.join("openapi/hotels.json")).unwrap(),
            "{\"openapi\": \"3.0.3\"}"
        );
        assert!(!dir.join("secret.yaml").exists() && !dir.join("other").exists());

        let err = localize_with(&format!("s3://{bucket}/travel/missing.yaml"), &dir, &sdk).await.unwrap_err();
        assert!(err.contains("does not exist") && err.contains("aws s3 cp"), "{err}");
        let err = localize_with("s3://no-such-bucket-baton/travel/team.yaml", &dir, &sdk).await.unwrap_err();
        assert!(
            err.starts_with("cannot read the configuration s3://no-such-bucket-baton/")
                && err.contains("NoSuchBucket"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[tokio::test]
    async fn an_ssm_config_arrives_with_the_parameters_beside_it() {
        let sdk = moto().await;
        let ssm = aws_sdk_ssm::Client::new(&sdk);
        let path = format!("/config-test-{}", fastrand::u64(..));
        for (name, value, kind) in [
            ("team.yaml", "entry: concierge\n", aws_sdk_ssm::types::ParameterType::String),
            ("openapi/hotels.json", "{}", aws_sdk_ssm::types::ParameterType::SecureString),
        ] {
            let put = ssm.put_parameter().name(format!("{path}/{name}")).value(value).r#type(kind);
            put.send().await.unwrap();
        }
        let dir = scratch("ssm");
        let config = localize_with(&format!("ssm:{path}/team.yaml"), &dir, &sdk).await.unwrap();
        assert_eq!(std::fs::read_to_string(&config).unwrap(), "entry: concierge\n");
        assert_eq!(std::fs::read_to_string(dir.join("openapi/hotels.json")).unwrap(), "{}", "decrypted");
        let err = localize_with(&format!("ssm:{path}/other.yaml"), &dir, &sdk).await.unwrap_err();
        assert!(err.contains("does not exist") && err.contains("put-parameter"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[tokio::test]
    async fn a_local_file_is_not_fetched() {
        assert_eq!(localize(Some(Path::new("config/team.yaml"))).await.unwrap(), None);
        assert_eq!(localize(None).await.unwrap(), None);
    }
}
