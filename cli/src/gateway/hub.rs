//! What the gateway's sessions share: the guarded tools as the last check
//! left them, the clients connected, and where each progress token the
//! upstream reports on leads back to.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use rmcp::model::{
    ProgressNotification, ProgressToken, ServerNotification, ToolListChangedNotification,
};
use rmcp::service::{Peer, ServiceError};
use rmcp::{RoleClient, RoleServer};

use super::config::ToolConfig;
use super::tools::Tools;
use crate::gateway::TARGET;

/// The shared state.
pub struct Hub {
    configs: BTreeMap<String, ToolConfig>,
    tools: RwLock<Arc<Tools>>,
    clients: Mutex<Vec<Peer<RoleServer>>>,
    progress: Mutex<HashMap<ProgressToken, ProgressTarget>>,
}

/// Where an upstream progress token leads, and the progress last passed
/// on: a client's progress only ever increases, as the protocol requires,
/// whatever order the notifications reach the gateway's tasks in.
struct ProgressTarget {
    client: Peer<RoleServer>,
    token: ProgressToken,
    last: Option<f64>,
}

impl Hub {
    /// A hub for the configured tools, none checked yet.
    pub fn new(configs: BTreeMap<String, ToolConfig>) -> Hub {
        Hub {
            configs,
            tools: RwLock::default(),
            clients: Mutex::default(),
            progress: Mutex::default(),
        }
    }

    /// The tools as the last check left them.
    pub fn tools(&self) -> Arc<Tools> {
        self.tools
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Lists the upstream's tools and checks every configured one against
    /// them. Returns the problems found; a configured tool with a problem
    /// is refused from now on.
    pub async fn check(&self, upstream: &Peer<RoleClient>) -> Result<Vec<String>, ServiceError> {
        let listed = upstream.list_all_tools().await?;
        let (tools, problems) = Tools::check(&self.configs, &listed);
        *self.tools.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(tools);
        Ok(problems)
    }

    /// A client connected: it gets the upstream's notifications.
    pub fn join(&self, client: Peer<RoleServer>) {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        clients.retain(|client| !client.is_transport_closed());
        clients.push(client);
    }

    /// Progress the upstream reports under `upstream` goes to `client`
    /// under `token`, until the returned guard is dropped.
    pub fn route_progress(
        self: &Arc<Self>,
        upstream: ProgressToken,
        client: Peer<RoleServer>,
        token: ProgressToken,
    ) -> ProgressRoute {
        self.progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                upstream.clone(),
                ProgressTarget {
                    client,
                    token,
                    last: None,
                },
            );
        ProgressRoute {
            hub: self.clone(),
            upstream,
        }
    }

    /// A notification from the upstream.
    pub async fn from_upstream(
        self: &Arc<Self>,
        notification: ServerNotification,
        upstream: Peer<RoleClient>,
    ) {
        match notification {
            ServerNotification::ProgressNotification(mut progress) => {
                let route = {
                    let mut routes = self.progress.lock().unwrap_or_else(PoisonError::into_inner);
                    routes
                        .get_mut(&progress.params.progress_token)
                        .and_then(|target| {
                            let later = target
                                .last
                                .is_none_or(|last| progress.params.progress > last);
                            later.then(|| {
                                target.last = Some(progress.params.progress);
                                (target.client.clone(), target.token.clone())
                            })
                        })
                };
                if let Some((client, token)) = route {
                    progress.params.progress_token = token;
                    let _ = client
                        .send_notification(ServerNotification::ProgressNotification(
                            ProgressNotification::new(progress.params),
                        ))
                        .await;
                }
            }
            ServerNotification::ToolListChangedNotification(_) => {
                // Checked on a task of its own: the check asks the upstream,
                // whose answer this session's loop must be free to read.
                let hub = self.clone();
                tokio::spawn(async move { hub.recheck(upstream).await });
            }
            // The upstream cancelling a request of its own: the gateway
            // sends it none that it would not answer at once.
            ServerNotification::CancelledNotification(_) => {}
            other => self.broadcast(other).await,
        }
    }

    async fn recheck(&self, upstream: Peer<RoleClient>) {
        match self.check(&upstream).await {
            Ok(problems) => {
                for problem in &problems {
                    tracing::error!(
                        target: TARGET,
                        "the upstream's tools changed, and a guarded tool no longer passes its \
                         check: it is refused until the configuration or the server is fixed: \
                         {problem}"
                    );
                }
            }
            Err(err) => tracing::error!(
                target: TARGET,
                "the upstream's tools changed, and listing them failed: {err}"
            ),
        }
        self.broadcast(ServerNotification::ToolListChangedNotification(
            ToolListChangedNotification::default(),
        ))
        .await;
    }

    async fn broadcast(&self, notification: ServerNotification) {
        let clients: Vec<Peer<RoleServer>> = {
            let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
            clients.retain(|client| !client.is_transport_closed());
            clients.clone()
        };
        for client in clients {
            let _ = client.send_notification(notification.clone()).await;
        }
    }
}

/// Removes a progress route when its request is answered or dropped.
pub struct ProgressRoute {
    hub: Arc<Hub>,
    upstream: ProgressToken,
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        self.hub
            .progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.upstream);
    }
}
