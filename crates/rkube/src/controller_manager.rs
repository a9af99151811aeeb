//! `rkube controller-manager`: the controllers (upstream kube-controller-manager) against any API
//! server, elected on the `kube-controller-manager` Lease in `kube-system` as upstream.

use clap::Args;

use crate::controller_flags::ControllerFlags;
use crate::leader::LeaderElectionFlags;

#[derive(Args)]
pub struct ControllerManagerArgs {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    #[command(flatten)]
    servers: crate::agent_lb::ServerFlags,
    #[command(flatten)]
    controllers: ControllerFlags,
    #[command(flatten)]
    leader_election: LeaderElectionFlags,
}

pub async fn run(args: ControllerManagerArgs) -> Result<(), String> {
    let selected = args.controllers.selected()?;
    let options = args
        .controllers
        .options(false, args.kubeconfig.as_deref())?;
    let client = crate::agent_lb::cluster_client(args.kubeconfig.as_deref(), &args.servers).await?;
    let elected = client.clone();
    crate::leader::run_elected(
        elected,
        &args.leader_election,
        "kube-controller-manager",
        move || controllers::run_selected(client, selected, options),
    )
    .await
}
