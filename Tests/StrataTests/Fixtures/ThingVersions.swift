import Strata

/// Two versions of a one-entity model: version 2 adds a required `rank` with a default, a
/// lightweight migration (the logging and tracing tests open a version-1 store with it).
enum ThingVersions {
    static func version1() throws -> ManagedObjectModel {
        try ManagedObjectModel(entities: [
            EntityDescription(name: "Thing", attributes: [AttributeDescription(name: "title", type: .string, isOptional: true)]),
        ], versionIdentifier: "1")
    }

    static func version2() throws -> ManagedObjectModel {
        try ManagedObjectModel(entities: [
            EntityDescription(name: "Thing", attributes: [
                AttributeDescription(name: "title", type: .string, isOptional: true),
                AttributeDescription(name: "rank", type: .integer64, isOptional: false, defaultValue: .integer(0)),
            ]),
        ], versionIdentifier: "2")
    }
}
