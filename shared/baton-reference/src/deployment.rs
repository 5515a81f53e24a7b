//! [`Deployment`]: the reference configuration (`config/baton.yaml`, embedded, over the runtime's
//! defaults) with the settings of the reference's own parts (Forethought), checked together, and
//! the [`Backends`] it runs over: the runtime's, with the [`Reference`] extension.

use std::sync::Arc;

use baton::config::{Config, ConfigError};
use baton::store::Store;
use baton::wiring::Backends;

use crate::extension::Reference;
use crate::support::forethought::ForethoughtConfig;

/// The reference configuration, embedded: its defaults live in `config/baton.yaml` only.
pub const REFERENCE_CONFIG: &str = include_str!("../../../config/baton.yaml");

/// The runtime's defaults with [`REFERENCE_CONFIG`] applied: offline models, the routed support
/// and shopping agents.
pub fn reference_config() -> Config {
    Config::default()
        .with_yaml(REFERENCE_CONFIG, "config/baton.yaml")
        .expect("the embedded reference config is valid")
}

/// What the reference deployment runs: the runtime's configuration and Forethought's settings.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// The runtime's configuration (agents, models, limits).
    pub config: Config,
    /// Forethought settings; `None` runs the offline help center as support.
    pub forethought: Option<ForethoughtConfig>,
}

impl Default for Deployment {
    /// [`reference_config`], support on the offline help center.
    fn default() -> Self {
        Deployment { config: reference_config(), forethought: None }
    }
}

impl From<Config> for Deployment {
    fn from(config: Config) -> Self {
        Deployment { config, forethought: None }
    }
}

impl Deployment {
    /// Checks values that would only fail later: the configuration's and Forethought's.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: &str| Err(ConfigError::Invalid { field, reason: reason.to_owned() });
        if let Some(ft) = &self.forethought {
            if !(ft.base_url.starts_with("http://") || ft.base_url.starts_with("https://")) {
                return invalid("FORETHOUGHT_BASE_URL", "must start with http:// or https://");
            }
            if ft.token.trim().is_empty() {
                return invalid("FORETHOUGHT_API_TOKEN", "is empty");
            }
        }
        self.config.validate()
    }

    /// The backends over `store` (in process memory when `None`), with the [`Reference`]
    /// extension.
    pub fn backends(&self, store: Option<Arc<dyn Store>>) -> Result<Backends, ConfigError> {
        self.validate()?;
        let vendor = |e: crate::support::forethought::VendorError| ConfigError::Extension {
            what: "the Forethought client".into(),
            reason: e.to_string(),
        };
        let forethought = self.forethought.clone();
        Ok(match store {
            Some(store) => Backends::over_store(store.clone())
                .with_extension(Arc::new(Reference::over_store(forethought, store).map_err(vendor)?)),
            None => Backends::in_memory().with_extension(Arc::new(Reference::in_memory(forethought).map_err(vendor)?)),
        })
    }

    /// A one-line description of the support agent, for start-up logs.
    pub fn describe_support(&self) -> String {
        match &self.forethought {
            Some(ft) => format!("support: Forethought Solve API at {} (channel {})", ft.base_url, ft.channel),
            None => {
                "support: offline help center (shipped articles; set FORETHOUGHT_API_TOKEN for Forethought)"
                    .into()
            }
        }
    }
}
