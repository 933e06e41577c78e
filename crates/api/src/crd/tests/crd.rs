//! CustomResourceDefinition validation (`TestValidateCustomResourceDefinition` and
//! `...Update` cases, in their v1 form), and the exact messages of common mistakes.

use serde_json::{json, Value};

use super::{assert_matches, crd, messages};
use crate::crd::{default_crd, validate_crd, validate_crd_status_update, validate_crd_update};

const REQ: &str = "FieldValueRequired";
const INV: &str = "FieldValueInvalid";
const UNS: &str = "FieldValueNotSupported";
const FORB: &str = "FieldValueForbidden";
const DUP: &str = "FieldValueDuplicate";
const MANY: &str = "FieldValueTooMany";

fn schema_of(c: &mut Value) -> &mut Value {
    &mut c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

#[test]
fn a_valid_crd_passes() {
    assert!(
        validate_crd(&crd()).is_empty(),
        "{:?}",
        validate_crd(&crd())
    );
}

#[test]
fn defaults_follow_v1() {
    let mut c = json!({"spec": {"names": {"kind": "Foo"}, "versions": [
        {"name": "v1", "storage": false}, {"name": "v2", "storage": true}],
        "conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "s", "namespace": "n"}}}}}});
    default_crd(&mut c);
    assert_eq!(c["spec"]["names"]["singular"], "foo");
    assert_eq!(c["spec"]["names"]["listKind"], "FooList");
    assert_eq!(
        c["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"],
        443
    );
    assert_eq!(c["status"]["storedVersions"], json!(["v2"]));
    let mut bare = json!({"spec": {"names": {}}});
    default_crd(&mut bare);
    assert_eq!(bare["spec"]["conversion"], json!({"strategy": "None"}));
    assert_eq!(bare["spec"]["names"], json!({"singular": ""}));
}

#[test]
fn missing_and_bad_values() {
    let missing = json!({"metadata": {"name": "plural.group.com"}, "spec": {}});
    assert_matches(
        "missing values",
        &validate_crd(&missing),
        &[
            (INV, "status.storedVersions"),
            (INV, "metadata.name"),
            (INV, "spec.versions"),
            (REQ, "spec.group"),
            (REQ, "spec.scope"),
            (REQ, "spec.names.plural"),
            (REQ, "spec.names.singular"),
            (REQ, "spec.names.kind"),
            (REQ, "spec.names.listKind"),
        ],
    );
    let mismatched = json!({"metadata": {"name": "plural.not.group.com"},
        "spec": {"group": "group.com", "names": {"plural": "plural"}}});
    assert_matches(
        "mismatched name",
        &validate_crd(&mismatched),
        &[
            (INV, "status.storedVersions"),
            (INV, "metadata.name"),
            (INV, "spec.versions"),
            (REQ, "spec.scope"),
            (REQ, "spec.names.singular"),
            (REQ, "spec.names.kind"),
            (REQ, "spec.names.listKind"),
        ],
    );
    let bad = json!({"metadata": {"name": "plural.group"}, "spec": {
        "group": "group", "scope": "foo",
        "names": {"plural": "pl()*ural", "singular": "value()*a", "kind": "value()*a", "listKind": "value()*a"},
        "versions": [{"name": "ve()*rsion", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}],
    }, "status": {"acceptedNames": {"plural": "pl()*ural", "singular": "value()*a", "kind": "value()*a", "listKind": "value()*a"}}});
    assert_matches(
        "bad names 01",
        &validate_crd(&bad),
        &[
            (INV, "status.storedVersions"),
            (INV, "metadata.name"),
            (INV, "spec.group"),
            (UNS, "spec.scope"),
            (INV, "spec.names.plural"),
            (INV, "spec.names.singular"),
            (INV, "spec.names.kind"),
            (INV, "spec.names.listKind"),
            (INV, "spec.names.listKind"),
            (INV, "status.acceptedNames.plural"),
            (INV, "status.acceptedNames.singular"),
            (INV, "status.acceptedNames.kind"),
            (INV, "status.acceptedNames.listKind"),
            (INV, "status.acceptedNames.listKind"),
            (INV, "spec.versions[0].name"),
            (INV, "spec.version"),
        ],
    );
    let msgs = messages(&validate_crd(&bad));
    assert!(msgs.contains(&"metadata.name: Invalid value: \"plural.group\": must be spec.names.plural+\".\"+spec.group".to_string()));
    assert!(msgs.contains(
        &"spec.group: Invalid value: \"group\": should be a domain with at least one dot"
            .to_string()
    ));
    assert!(msgs.contains(
        &"spec.scope: Unsupported value: \"foo\": supported values: \"Cluster\", \"Namespaced\""
            .to_string()
    ));
    assert!(msgs.contains(
        &"spec.names.listKind: Invalid value: \"value()*a\": kind and listKind may not be the same"
            .to_string()
    ));
    assert!(msgs.contains(&"status.storedVersions: Invalid value: []string(nil): must have at least one stored version".to_string()));
}

#[test]
fn versions_rules() {
    let mut c = crd();
    c["spec"]["versions"] = json!([
        {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
    ]);
    assert_eq!(
        messages(&validate_crd(&c)),
        vec![
            "spec.versions: Invalid value: []apiextensions.CustomResourceDefinitionVersion{...}: must contain unique version names",
            "spec.versions: Invalid value: []apiextensions.CustomResourceDefinitionVersion{...}: must have exactly one version marked as storage version",
        ]
    );
    let mut c = crd();
    c["spec"]["versions"][0]["schema"] = Value::Null;
    assert_eq!(
        messages(&validate_crd(&c)),
        vec!["spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"]
    );
    let mut c = crd();
    c["status"]["storedVersions"] = json!(["v0", "v1"]);
    assert_eq!(
        messages(&validate_crd(&c)),
        vec!["status.storedVersions[0]: Invalid value: \"v0\": must appear in spec.versions"]
    );
    let mut c = crd();
    c["spec"]["versions"][0]["deprecationWarning"] = json!("x");
    assert_eq!(
        messages(&validate_crd(&c)),
        vec!["spec.versions[0].deprecationWarning: Invalid value: \"x\": can only be set for deprecated versions"]
    );
}

#[test]
fn schema_errors_are_reported_where_kubernetes_reports_them() {
    // One version: the schema is folded to the top level (spec.validation).
    let mut c = crd();
    *schema_of(&mut c) = json!({"type": "object", "properties": {"spec": {"properties": {"x": {"type": "string"}}}}});
    assert_eq!(
        messages(&validate_crd(&c)),
        vec!["spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"]
    );
    // Two versions with different schemas: per version.
    let mut c = crd();
    let v2 = json!({"name": "v2", "served": true, "storage": false,
        "schema": {"openAPIV3Schema": {"type": "object", "additionalProperties": {"type": "string"}}}});
    c["spec"]["versions"].as_array_mut().unwrap().push(v2);
    assert_eq!(
        messages(&validate_crd(&c)),
        vec!["spec.versions[1].schema.openAPIV3Schema.additionalProperties: Forbidden: must not be used at the root"]
    );
    let mut c = crd();
    *schema_of(&mut c) = json!({"type": "object", "properties": {
        "metadata": {"type": "object", "properties": {"name": {"type": "string"}, "labels": {"type": "object"}}},
        "spec": {"type": "object", "properties": {"p": {"type": "string", "pattern": "(a"}}},
    }});
    assert_eq!(
        messages(&validate_crd(&c)),
        vec![
            "spec.validation.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
            "spec.validation.openAPIV3Schema.properties[spec].properties[p].pattern: Invalid value: \"(a\": must be a valid regular expression, but isn't: error parsing regexp: missing closing ): `(a`",
        ]
    );
    let mut c = crd();
    *schema_of(&mut c) = json!({"type": "object", "properties": {"spec": {"type": "object",
        "anyOf": [{"properties": {"x": {"type": "string"}}}]}}});
    assert_eq!(
        messages(&validate_crd(&c)),
        vec!["spec.validation.openAPIV3Schema.properties[spec].anyOf[0].properties[x].type: Forbidden: must be empty to be structural"]
    );
    let mut c = crd();
    *schema_of(&mut c) = json!({"type": "object", "anyOf": [{"properties": {"x": {}}}]});
    assert_eq!(
        messages(&validate_crd(&c)),
        vec!["spec.validation.openAPIV3Schema.properties[x]: Required value: because it is defined in spec.validation.openAPIV3Schema.anyOf[0].properties[x]"]
    );
    let mut c = crd();
    *schema_of(&mut c) = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "t": {"type": "object", "x-kubernetes-embedded-resource": true},
        "i": {"x-kubernetes-int-or-string": true, "x-kubernetes-preserve-unknown-fields": true},
    }}}});
    assert_eq!(
        messages(&validate_crd(&c)),
        vec![
            "spec.validation.openAPIV3Schema.properties[spec].properties[i].x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if x-kubernetes-int-or-string is true",
            "spec.validation.openAPIV3Schema.properties[spec].properties[t].properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ]
    );
}

#[test]
fn defaults_must_validate_and_be_pruned() {
    let mut c = crd();
    *schema_of(&mut c) = json!({"type": "object", "properties": {"spec": {"type": "object",
        "default": {"a": "x", "b": "y"},
        "properties": {"a": {"type": "string"}, "n": {"type": "integer", "default": "x"}}}}});
    assert_eq!(
        messages(&validate_crd(&c)),
        vec![
            "spec.validation.openAPIV3Schema.properties[spec].default: Invalid value: map[string]interface {}{\"a\":\"x\", \"b\":\"y\"}: must not have unknown fields",
            "spec.validation.openAPIV3Schema.properties[spec].properties[n].default: Invalid value: \"string\":  in body must be of type integer: \"string\"",
        ]
    );
    let mut c = crd();
    c["spec"]["preserveUnknownFields"] = json!(true);
    *schema_of(&mut c) =
        json!({"type": "object", "properties": {"a": {"type": "string", "default": "x"}}});
    assert_matches(
        "defaults need preserveUnknownFields false",
        &validate_crd(&c),
        &[
            (INV, "spec.preserveUnknownFields"),
            (INV, "spec.preserveUnknownFields"),
        ],
    );
}

#[test]
fn subresources_and_columns() {
    let mut c = crd();
    c["spec"]["versions"][0]["subresources"] = json!({"status": {}, "scale": {
        "specReplicasPath": "spec.replicas", "statusReplicasPath": ".spec.replicas", "labelSelectorPath": ".metadata.labels"}});
    c["spec"]["versions"][0]["additionalPrinterColumns"] = json!([
        {"name": "", "type": "bad", "format": "x", "jsonPath": "spec"},
        {"name": "n", "jsonPath": ""},
    ]);
    assert_eq!(
        messages(&validate_crd(&c)),
        vec![
            "spec.additionalPrinterColumns[0].JSONPath: Invalid value: \"spec\": must be a simple json path starting with .",
            "spec.additionalPrinterColumns[0].format: Invalid value: \"x\": must be one of byte,date,date-time,double,float,int32,int64,password",
            "spec.additionalPrinterColumns[0].name: Required value",
            "spec.additionalPrinterColumns[0].type: Invalid value: \"bad\": must be one of boolean,date,integer,number,string",
            "spec.additionalPrinterColumns[1].JSONPath: Required value",
            "spec.additionalPrinterColumns[1].type: Required value: must be one of boolean,date,integer,number,string",
            "spec.subresources.scale.labelSelectorPath: Invalid value: \".metadata.labels\": should be a json path under either .spec or .status",
            "spec.subresources.scale.specReplicasPath: Invalid value: \"spec.replicas\": must be a simple json path starting with .",
            "spec.subresources.scale.statusReplicasPath: Invalid value: \".spec.replicas\": should be a json path under .status",
        ]
    );
    // With the status subresource, the root may only have some fields.
    let mut c = crd();
    c["spec"]["versions"][0]["subresources"] = json!({"status": {}});
    schema_of(&mut c)["x-kubernetes-embedded-resource"] = json!(true);
    let errs = validate_crd(&c);
    assert!(errs
        .iter()
        .any(|e| e.field == "spec.validation.openAPIV3Schema"
            && e.message.contains(
                "fields are allowed at the root of the schema if the status subresource is enabled"
            )));
}

#[test]
fn selectable_fields() {
    let mut c = crd();
    c["spec"]["versions"][0]["selectableFields"] = json!([
        {"jsonPath": ".spec.color"},
        {"jsonPath": ".spec.nope"},
        {"jsonPath": ".spec"},
        {"jsonPath": ".spec.color"},
        {"jsonPath": ""},
        {"jsonPath": ".spec['color']"},
    ]);
    assert_matches(
        "selectableFields",
        &validate_crd(&c),
        &[
            (INV, "spec.selectableFields[1].jsonPath"),
            (INV, "spec.selectableFields[2].jsonPath"),
            (DUP, "spec.selectableFields[3].jsonPath"),
            (REQ, "spec.selectableFields[4].jsonPath"),
            (INV, "spec.selectableFields[5].jsonPath"),
        ],
    );
    let msgs = messages(&validate_crd(&c));
    assert!(msgs.contains(&"spec.selectableFields[1].jsonPath: Invalid value: \".spec.nope\": is an invalid path: does not refer to a valid field".to_string()));
    assert!(msgs.contains(&"spec.selectableFields[5].jsonPath: Invalid value: \".spec['color']\": is an invalid path: array notation is not allowed".to_string()));
    let mut c = crd();
    let mut props = serde_json::Map::new();
    let mut fields = Vec::new();
    for i in 0..9 {
        props.insert(format!("f{i}"), json!({"type": "string"}));
        fields.push(json!({"jsonPath": format!(".spec.f{i}")}));
    }
    schema_of(&mut c)["properties"]["spec"]["properties"] = Value::Object(props);
    c["spec"]["versions"][0]["selectableFields"] = Value::Array(fields);
    assert_matches(
        "too many",
        &validate_crd(&c),
        &[(MANY, "spec.selectableFields")],
    );
}

#[test]
fn conversion() {
    let webhook = |cc: Value, versions: Value| {
        let mut c = crd();
        c["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {"clientConfig": cc, "conversionReviewVersions": versions}});
        validate_crd(&c)
    };
    assert!(webhook(json!({"url": "https://example.com/convert"}), json!(["v1"])).is_empty());
    assert!(webhook(
        json!({"service": {"name": "s", "namespace": "n", "port": 443}}),
        json!(["v1beta1"])
    )
    .is_empty());
    assert_matches(
        "both service and URL provided",
        &webhook(
            json!({"url": "https://a", "service": {"name": "s", "namespace": "n", "port": 443}}),
            json!(["v1"]),
        ),
        &[(REQ, "spec.conversion.webhookClientConfig")],
    );
    assert_matches(
        "invalid port 0",
        &webhook(
            json!({"service": {"name": "s", "namespace": "n", "port": 0}}),
            json!(["v1"]),
        ),
        &[(INV, "spec.conversion.webhookClientConfig.service.port")],
    );
    assert_eq!(
        messages(&webhook(json!({"url": "http://a?x#y"}), json!(["v3", "v3"]))),
        vec![
            "spec.conversion.conversionReviewVersions: Invalid value: []string{\"v3\", \"v3\"}: must include at least one of v1, v1beta1",
            "spec.conversion.conversionReviewVersions[1]: Invalid value: \"v3\": duplicate version",
            "spec.conversion.webhookClientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
            "spec.conversion.webhookClientConfig.url: Invalid value: \"x\": query parameters are not permitted in the URL",
            "spec.conversion.webhookClientConfig.url: Invalid value: \"y\": fragments are not permitted in the URL",
        ]
    );
    let mut c = crd();
    c["spec"]["conversion"] = json!({"strategy": "Webhook"});
    assert_matches(
        "missing_webhookconfig",
        &validate_crd(&c),
        &[
            (REQ, "spec.conversion.webhookClientConfig"),
            (REQ, "spec.conversion.conversionReviewVersions"),
        ],
    );
    let mut c = crd();
    c["spec"]["conversion"] = json!({"strategy": "None", "webhook": {"clientConfig": {"url": "https://a"}, "conversionReviewVersions": ["v1"]}});
    assert_matches(
        "webhookconfig_should_not_be_set",
        &validate_crd(&c),
        &[
            (FORB, "spec.conversion.webhookClientConfig"),
            (FORB, "spec.conversion.conversionReviewVersions"),
        ],
    );
    let mut c = crd();
    c["spec"]["conversion"] = json!({"strategy": "non_existing_conversion"});
    assert_matches(
        "invalid_conversion_strategy",
        &validate_crd(&c),
        &[(UNS, "spec.conversion.strategy")],
    );
    let mut c = crd();
    c["spec"]["preserveUnknownFields"] = json!(true);
    assert_eq!(
        messages(&validate_crd(&c)),
        vec!["spec.preserveUnknownFields: Invalid value: true: cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead"]
    );
}

#[test]
fn api_approval_for_protected_groups() {
    let mut c = crd();
    c["spec"]["group"] = json!("foo.k8s.io");
    c["metadata"]["name"] = json!("foos.foo.k8s.io");
    assert_eq!(
        messages(&validate_crd(&c)),
        vec!["metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111"]
    );
    c["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": "maybe"});
    assert_eq!(validate_crd(&c)[0].reason, INV);
    c["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": "https://github.com/kubernetes/kubernetes/pull/78458"});
    assert!(validate_crd(&c).is_empty());
    c["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": "unapproved, testing"});
    assert!(validate_crd(&c).is_empty());
}

#[test]
fn updates() {
    let old = crd();
    let mut new = crd();
    new["spec"]["group"] = json!("other.com");
    new["spec"]["names"]["plural"] = json!("bars");
    new["spec"]["scope"] = json!("Cluster");
    new["metadata"]["name"] = json!("bars.other.com");
    assert_matches(
        "immutable names",
        &validate_crd_update(&new, &old),
        &[
            (INV, "metadata.name"),
            (INV, "spec.group"),
            (INV, "spec.names.plural"),
        ],
    );
    let mut established = crd();
    established["status"]["conditions"] = json!([{"type": "Established", "status": "True"}]);
    let mut new = established.clone();
    new["spec"]["scope"] = json!("Cluster");
    new["spec"]["names"]["kind"] = json!("Bar");
    new["spec"]["names"]["listKind"] = json!("BarList");
    assert_eq!(
        messages(&validate_crd_update(&new, &established)),
        vec![
            "spec.names.kind: Invalid value: \"Bar\": field is immutable",
            "spec.scope: Invalid value: \"Cluster\": field is immutable",
        ]
    );
    // Rules the old object already broke are not enforced on update.
    let mut old = crd();
    schema_of(&mut old)["properties"]["spec"]["properties"]["bad"] = json!({"type": "bogus"});
    let mut new = old.clone();
    new["spec"]["versions"][0]["served"] = json!(false);
    let errs = validate_crd_update(&new, &old);
    assert!(errs.iter().all(|e| e.reason != UNS), "{errs:?}");
    assert!(!validate_crd(&new).is_empty());
    // Status updates only check ObjectMeta and the accepted names.
    let mut new = crd();
    new["status"]["acceptedNames"] = json!({"plural": "Bad!"});
    new["spec"]["group"] = json!("whatever");
    assert_matches(
        "status",
        &validate_crd_status_update(&new, &crd()),
        &[(INV, "status.acceptedNames.plural")],
    );
}
