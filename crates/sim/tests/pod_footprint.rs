//! How many heap bytes one cached Pod costs in each form a process holds it (issue 25: memory per
//! pod), measured with a counting allocator on a pod as the density bench's Deployments make it
//! (`density-pod.json`: a ReplicaSet's pod, bound, Running, with the managedFields the API server
//! records). The numbers print with `--nocapture`; the assertions keep the slim form slim.
//!
//! Counted: bytes requested from the allocator and still held, divided by the copies made; the
//! allocator's own rounding to size classes comes on top.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The counter is process-wide: measurements must not overlap (tests run on threads).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const JSON: &str = include_str!("density-pod.json");
const COPIES: usize = 200;

/// Heap bytes held per value made by `make` (the value boxed, as an `Arc<Pod>` in a cache is).
fn bytes_per<T>(make: impl Fn() -> T) -> usize {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut held: Vec<Box<T>> = Vec::with_capacity(COPIES);
    let before = LIVE.load(Ordering::Relaxed);
    for _ in 0..COPIES {
        held.push(Box::new(make()));
    }
    let after = LIVE.load(Ordering::Relaxed);
    drop(held);
    ((after - before) as usize) / COPIES
}

fn whole() -> Pod {
    serde_json::from_str(JSON).expect("fixture parses")
}

#[test]
fn the_sim_cached_pod_is_a_fraction_of_a_whole_one() {
    let compact = serde_json::to_vec(&serde_json::from_str::<serde_json::Value>(JSON).unwrap())
        .unwrap()
        .len();
    let json = bytes_per(|| {
        serde_json::to_vec(&serde_json::from_str::<serde_json::Value>(JSON).unwrap()).unwrap()
    });
    let typed = bytes_per(whole);
    let trimmed = bytes_per(|| {
        let mut p = whole();
        p.metadata.managed_fields = None;
        p
    });
    let slim =
        bytes_per(|| serde_json::from_str::<sim::cached::SimPod>(JSON).expect("fixture decodes"));
    let managed = bytes_per(|| whole().metadata.managed_fields);
    println!("density pod: {compact} bytes of JSON");
    println!("  JSON bytes held (watch cache form): {json} B");
    println!("  typed Pod, whole: {typed} B (managedFields alone {managed} B)");
    println!("  typed Pod, managedFields trimmed (controllers, scheduler): {trimmed} B");
    println!(
        "  sim's cached form (SimPod, {} B inline): {slim} B",
        std::mem::size_of::<sim::cached::SimPod>()
    );
    {
        use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodSpec, PodStatus};
        use std::mem::size_of;
        println!(
            "  inline sizes: Pod {} B, PodSpec {} B, Container {} B, PodStatus {} B, ContainerStatus {} B",
            size_of::<Pod>(),
            size_of::<PodSpec>(),
            size_of::<Container>(),
            size_of::<PodStatus>(),
            size_of::<ContainerStatus>()
        );
    }
    assert!(trimmed < typed, "{trimmed} < {typed}");
    // The cached form holds a few strings: well under the JSON it is decoded from.
    assert!(
        slim * 4 < trimmed && slim < compact,
        "slim {slim}, trimmed {trimmed}, JSON {compact}"
    );
}
