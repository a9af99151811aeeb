//! `rkube controller-manager`: the controllers (upstream kube-controller-manager) against any API
//! server, elected on the `kube-controller-manager` Lease in `kube-system` as upstream.

use clap::Args;

use crate::leader::LeaderElectionFlags;

#[derive(Args)]
pub struct ControllerManagerArgs {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    /// Controllers to run, upstream's syntax: `*` every controller on by default, `foo` turns foo on,
    /// `-foo` turns it off (canonical names such as `job-controller`, or short ones such as `job`).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    controllers: Vec<String>,
    #[command(flatten)]
    leader_election: LeaderElectionFlags,
}

pub async fn run(args: ControllerManagerArgs) -> Result<(), String> {
    let selected = controllers::select(&args.controllers)?;
    let client = crate::cluster_client(args.kubeconfig.as_deref()).await?;
    let elected = client.clone();
    crate::leader::run_elected(
        elected,
        &args.leader_election,
        "kube-controller-manager",
        move || controllers::run_selected(client, selected),
    )
    .await
}
