use super::*;

fn obj(name: &str, api_version: &str) -> Value {
    json!({"apiVersion": api_version, "kind": "Widget",
           "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "7",
                        "labels": {"a": "1"}, "generation": 2},
           "spec": {"hostPort": "h:80"}})
}

#[test]
fn the_first_known_review_version_is_used_and_the_client_config_checked() {
    let tls = TlsCache::default();
    let crd = json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v2", "v1beta1", "v1"],
        "clientConfig": {"url": "https://127.0.0.1:1/convert"}}}}});
    let hook = Webhook::of(&crd, &tls).unwrap();
    assert_eq!(hook.review_version, Some(ReviewVersion::V1beta1));
    assert!(hook.endpoint.is_ok());
    let none = json!({"spec": {"conversion": {"strategy": "None"}}});
    assert!(Webhook::of(&none, &tls).is_none());
    let unknown = json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v9"], "clientConfig": {"url": "http://x/"}}}}});
    let hook = Webhook::of(&unknown, &tls).unwrap();
    assert_eq!(hook.review_version, None);
    assert!(hook.endpoint.unwrap_err().contains("scheme must be https"));
}

#[test]
fn the_request_carries_the_objects_as_sent() {
    let raw = vec![
        serde_json::to_vec(&obj("a", "example.com/v1")).unwrap(),
        serde_json::to_vec(&obj("b", "example.com/v1")).unwrap(),
    ];
    let body = request_body(ReviewVersion::V1, "u1", "example.com/v2", &raw);
    let review: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(review["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(review["kind"], "ConversionReview");
    assert_eq!(review["request"]["uid"], "u1");
    assert_eq!(review["request"]["desiredAPIVersion"], "example.com/v2");
    assert_eq!(review["request"]["objects"][1]["metadata"]["name"], "b");
    let empty = request_body(ReviewVersion::V1beta1, "u", "g/v", &[] as &[Vec<u8>]);
    let review: Value = serde_json::from_slice(&empty).unwrap();
    assert_eq!(review["request"]["objects"], json!([]));
}

#[test]
fn responses_are_checked_as_upstream() {
    let ok = |uid: &str, objects: Value| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
               "response": {"uid": uid, "result": {"status": "Success"}, "convertedObjects": objects}})
    };
    assert_eq!(
        converted_objects(ReviewVersion::V1, "u", ok("u", json!([1]))).unwrap(),
        vec![json!(1)]
    );
    assert_eq!(
        converted_objects(ReviewVersion::V1, "u", ok("x", json!([]))).unwrap_err(),
        r#"expected response.uid="u", got "x""#
    );
    let mut wrong_kind = ok("u", json!([]));
    wrong_kind["kind"] = "AdmissionReview".into();
    assert_eq!(
        converted_objects(ReviewVersion::V1, "u", wrong_kind.clone()).unwrap_err(),
        "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got apiextensions.k8s.io/v1, Kind=AdmissionReview"
    );
    // v1beta1 checks neither the kind nor the uid.
    assert!(converted_objects(ReviewVersion::V1beta1, "u", wrong_kind).is_ok());
    let refused = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "response": {"uid": "u", "result": {"status": "Failure", "message": "no way"}}});
    assert_eq!(
        converted_objects(ReviewVersion::V1, "u", refused).unwrap_err(),
        "no way"
    );
    let bare = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "response": {"uid": "u", "result": {"status": "Failure"}}});
    assert_eq!(
        converted_objects(ReviewVersion::V1, "u", bare).unwrap_err(),
        "response.result.status was 'Failure', not 'Success'"
    );
    let none = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"});
    assert_eq!(
        converted_objects(ReviewVersion::V1, "u", none).unwrap_err(),
        "no response provided"
    );
}

#[test]
fn converted_objects_keep_their_metadata_but_labels_and_annotations() {
    let original = obj("a", "example.com/v1");
    let mut c = obj("a", "example.com/v2");
    c["metadata"]["generation"] = 99.into();
    c["metadata"]["resourceVersion"] = "1".into();
    c["metadata"]["labels"] = json!({"a": "2", "b": "3"});
    c["metadata"]["annotations"] = json!({"x": "y"});
    c["spec"] = json!({"host": "h", "port": "80"});
    let out = check(
        &[&original],
        vec![c],
        "example.com/v2",
        "example.com/v1, Kind=Widget",
    )
    .unwrap();
    let m = &out[0]["metadata"];
    assert_eq!(m["generation"], 2);
    assert_eq!(m["resourceVersion"], "7");
    assert_eq!(m["labels"], json!({"a": "2", "b": "3"}));
    assert_eq!(m["annotations"], json!({"x": "y"}));
    assert_eq!(out[0]["spec"]["host"], "h");

    // Labels dropped by the webhook are dropped.
    let mut c = obj("a", "example.com/v2");
    c["metadata"].as_object_mut().unwrap().remove("labels");
    let out = check(&[&original], vec![c], "example.com/v2", "s").unwrap();
    assert!(out[0]["metadata"].get("labels").is_none());
}

#[test]
fn bad_conversions_fail_with_upstreams_messages() {
    let source = "example.com/v1, Kind=Widget";
    let a = obj("a", "example.com/v1");
    let b = obj("b", "example.com/v1");
    let run = |originals: &[&Value], converted: Vec<Value>| {
        check(originals, converted, "example.com/v2", source).unwrap_err()
    };
    assert_eq!(
        run(&[&a, &b], vec![obj("a", "example.com/v2")]),
        "conversion webhook for example.com/v1, Kind=Widget returned 1 objects, expected 2"
    );
    assert_eq!(
        run(&[&a], vec![obj("a", "example.com/v1")]),
        "conversion webhook for example.com/v1, Kind=Widget returned invalid object at index 0: invalid groupVersion (expected example.com/v2, received example.com/v1)"
    );
    assert_eq!(
        run(&[&a, &b], vec![obj("a", "example.com/v2"), obj("c", "example.com/v2")]),
        "conversion webhook for example.com/v1, Kind=Widget returned invalid converted object at index 2: must have the same name: b != c"
    );
    let mut other_uid = obj("a", "example.com/v2");
    other_uid["metadata"]["uid"] = "zzz".into();
    assert_eq!(
        run(&[&a], vec![other_uid]),
        "conversion webhook for example.com/v1, Kind=Widget returned invalid object: must have the same UID: uid-a != zzz"
    );
    let mut bad_label = obj("a", "example.com/v2");
    bad_label["metadata"]["labels"] = json!({"a": "not valid!"});
    let err = run(&[&a], vec![bad_label]);
    assert!(
        err.starts_with("conversion webhook for example.com/v1, Kind=Widget returned invalid metadata: metadata.labels: Invalid value: \"not valid!\""),
        "{err}"
    );
    let mut not_string = obj("a", "example.com/v2");
    not_string["metadata"]["annotations"] = json!({"k": 1});
    assert_eq!(
        run(&[&a], vec![not_string]),
        "conversion webhook for example.com/v1, Kind=Widget returned invalid metadata: metadata.annotations[k] must be a string, but is int64 in converted object"
    );
    let mut no_meta = obj("a", "example.com/v2");
    no_meta.as_object_mut().unwrap().remove("metadata");
    // Identity is checked first: the missing name differs.
    assert!(run(&[&a], vec![no_meta]).contains("must have the same name: a != "));
    assert_eq!(
        run(&[&a], vec![json!({"apiVersion": "example.com/v2"})]),
        "Object 'Kind' is missing in '{\"apiVersion\":\"example.com/v2\"}'"
    );
}

#[test]
fn converted_objects_are_remembered_by_their_exact_bytes_within_a_bound() {
    let cache = Converted::default();
    let raw = serde_json::to_vec(&obj("a", "example.com/v1")).unwrap();
    let done = obj("a", "example.com/v2");
    cache.put("example.com/v2", &raw, &done);
    assert_eq!(cache.get("example.com/v2", &raw), Some(done));
    assert_eq!(cache.get("example.com/v3", &raw), None);
    let mut other = raw.clone();
    other.push(b' ');
    assert_eq!(cache.get("example.com/v2", &other), None);
    // Past the byte bound it starts over rather than grow.
    let big = vec![b'x'; CACHE_MAX_OBJECT];
    for i in 0..(CACHE_BYTES / CACHE_MAX_OBJECT + 1) {
        cache.put(&format!("g/v{i}"), &big, &json!(i));
    }
    let inner = cache.inner.lock().unwrap();
    assert!(inner.1 <= CACHE_BYTES);
    assert!(inner.0.len() < CACHE_BYTES / CACHE_MAX_OBJECT + 2);
    // Too large to keep.
    drop(inner);
    cache.put("g/huge", &vec![b'y'; CACHE_MAX_OBJECT + 1], &json!(0));
    assert_eq!(cache.get("g/huge", &vec![b'y'; CACHE_MAX_OBJECT + 1]), None);
}
