internal import StrataLocks

/// Turns a Swift key path of a typed subclass (`\Note.title`, `\Note.folder?.name`)
/// into the property names it goes through (`["title"]`, `["folder", "name"]`).
///
/// Key paths cannot be inspected, so the key path is *read* on a recording prototype:
/// an object marked as recording (``ObjectBits/recording``) whose owner is a
/// ``KeyPathRecorder``. The typed accessors of `@Attribute` and `@Relationship` take
/// their slow path for it; there they report the property they were asked for to the
/// owner's recording hook (``ObjectOwner/recordRead(of:property:valueType:destination:)``),
/// and a to-one relationship hands back a prototype of its destination class so that the
/// path can go on. Ordinary objects never reach this code.
enum KeyPathNames {
    /// The property names `keyPath` reads, from `Root`'s entity.
    ///
    /// - Throws: ``FetchPredicateError`` of kind ``FetchPredicateError/Kind/unsupported``
    ///   when the key path reads no `@Attribute` or `@Relationship` property (a
    ///   computed property of plain Swift, say), reads more than one from the same
    ///   object, or goes on past a to-many relationship.
    static func components<Root: ManagedObject>(of keyPath: PartialKeyPath<Root>) throws(FetchPredicateError) -> [String] {
        let cacheKey = CacheKey(keyPath: ObjectIdentifier(keyPath), root: ObjectIdentifier(Root.self))
        if let names = cache.withLock({ $0.names[cacheKey] }) { return names }
        let names = try recordedComponents(of: keyPath)
        let kept = UInt(bitPattern: Unmanaged.passRetained(keyPath as AnyKeyPath).toOpaque())
        cache.withLock { cache in
            if cache.names.count >= cacheCapacity { cache.removeAll() }
            cache.names[cacheKey] = names
            cache.keyPaths.append(kept)
        }
        return names
    }

    /// A key path (by identity) read from a root class.
    private struct CacheKey: Hashable {
        var keyPath: ObjectIdentifier
        var root: ObjectIdentifier
    }

    /// The names of the key paths read so far. A key path written in the source is one
    /// object for the life of the process (the runtime makes it once), so its identity
    /// names it; the cache keeps each key path it names alive, so that no other key path
    /// can take its address. Bounded: key paths made at run time (`appending(path:)`)
    /// are new objects each time.
    private struct Cache {
        var names: [CacheKey: [String]] = [:]
        /// The key paths named, retained (as addresses: key paths are immutable).
        var keyPaths: [UInt] = []

        mutating func removeAll() {
            for address in keyPaths {
                Unmanaged<AnyKeyPath>.fromOpaque(UnsafeRawPointer(bitPattern: address)!).release()
            }
            self = Cache()
        }
    }

    private static let cacheCapacity = 4096
    private static let cache = LockedValue(Cache())

    /// ``components(of:)``, read on a recording prototype.
    private static func recordedComponents<Root: ManagedObject>(of keyPath: PartialKeyPath<Root>) throws(FetchPredicateError) -> [String] {
        let recorder = KeyPathRecorder()
        guard let root = recorder.prototype(of: Root.self) as? Root else {
            throw FetchPredicateError(kind: .unsupported, message: "\(Root.self) cannot make a prototype of itself")
        }
        var result: Any?
        let recorded = withExtendedLifetime(recorder) { () -> Result<[String], FetchPredicateError> in
            result = root[keyPath: keyPath]
            return recorder.result
        }
        switch recorded {
        case .success(let names) where !names.isEmpty:
            // The key path must end at the last property read (through optional chaining,
            // as an Optional of it): `\Note.title.count` reads title, then goes on.
            let valueType = type(of: keyPath).valueType
            guard let last = recorder.lastValueType else { return names }
            if valueType == last || valueType == optionalType(of: last) {
                // A computed property of the same type that transforms one stored value
                // (`label.uppercased()`) shows itself by returning something else.
                if let returned = result as? any AttributeStorable,
                   !isSame(returned.attributeValue, recorder.lastReturned) {
                    throw FetchPredicateError(
                        kind: .unsupported,
                        message: "a key path of \(Root.self) reads \(names.joined(separator: ".")) but returns another value: "
                            + "a computed property cannot be used in a query")
                }
                return names
            }
            if valueType == Int.self || valueType == Int?.self, recorder.lastIsToMany { return names + ["@count"] }
            throw FetchPredicateError(
                kind: .unsupported,
                message: "a key path of \(Root.self) goes on past \(names.joined(separator: ".")) "
                    + "(of type \(last)) to a value of type \(valueType), which a query cannot read")
        case .success:
            if keyPath == \Root.objectID as PartialKeyPath<Root> { return ["SELF"] }
            throw FetchPredicateError(
                kind: .unsupported,
                message: "a key path of \(Root.self) to a value of type \(type(of: keyPath).valueType) reads no @Attribute or @Relationship property")
        case .failure(let error): throw error
        }
    }

    /// Equality in which NaN equals NaN (a default value may be one).
    private static func isSame(_ a: AttributeValue?, _ b: AttributeValue?) -> Bool {
        switch (a, b) {
        case (.double(let x)?, .double(let y)?): x.bitPattern == y.bitPattern || x == y
        case (.float(let x)?, .float(let y)?): x.bitPattern == y.bitPattern || x == y
        case (.date(let x)?, .date(let y)?):
            x.timeIntervalSinceReferenceDate.bitPattern == y.timeIntervalSinceReferenceDate.bitPattern || x == y
        default: a == b
        }
    }

    private static func optionalType(of type: Any.Type) -> Any.Type {
        func wrap<T>(_: T.Type) -> Any.Type { T?.self }
        return wrap(type)
    }

    /// As ``components(of:)``, for a key path whose root class is known only at run time.
    ///
    /// (A generic function called with a `ManagedObject.Type` value binds its parameter
    /// to `ManagedObject` itself: class metatypes are not existentials and do not open.
    /// A class method sees the dynamic class as `Self`.)
    static func components(of keyPath: AnyKeyPath, rootClass: ManagedObject.Type) throws(FetchPredicateError) -> [String] {
        try rootClass.keyPathComponents(of: keyPath)
    }
}

extension ManagedObject {
    /// ``KeyPathNames/components(of:)`` with `Root` bound to the class this is called on.
    fileprivate class func keyPathComponents(of keyPath: AnyKeyPath) throws(FetchPredicateError) -> [String] {
        guard let typed = keyPath as? PartialKeyPath<Self> else {
            throw FetchPredicateError(kind: .unsupported, message: "the key path \(keyPath) does not start at \(Self.self)")
        }
        return try KeyPathNames.components(of: typed)
    }
}

/// The owner of recording prototypes: it notes every property the typed accessors are
/// asked for, in order, and checks that they form one path.
final class KeyPathRecorder: ObjectOwner {
    private var names: [String] = []
    private var failure: FetchPredicateError?
    /// The object whose property comes next in the path.
    private weak var expected: ManagedObject?
    /// The Swift type of the last property read.
    private(set) var lastValueType: Any.Type?
    /// What the typed accessor of the last attribute read returned (its default value).
    private(set) var lastReturned: AttributeValue?
    /// Whether the last property read is a to-many relationship.
    private(set) var lastIsToMany = false
    /// Every prototype made, kept alive while recording (objects do not keep their
    /// owner).
    private var prototypes: [ManagedObject] = []

    deinit {
        // A prototype that outlives the recording keeps no owner.
        for prototype in prototypes { prototype.outlive(self) }
    }

    var result: Result<[String], FetchPredicateError> {
        failure.map { .failure($0) } ?? .success(names)
    }

    /// A prototype of `type`: default values, recording, owned by this recorder.
    func prototype(of type: ManagedObject.Type) -> ManagedObject {
        let object = type.init(entity: type.entity())
        object.enterRecording(for: self)
        prototypes.append(object)
        expected = object
        return object
    }

    /// Notes that the typed accessor of `property` was read on `object`; returns the
    /// destination prototype for a to-one relationship.
    override func recordRead(
        of object: ManagedObject, property: PropertySlot?, valueType: Any.Type, destination: ManagedObject.Type?
    ) -> ManagedObject? {
        guard failure == nil else { return nil }
        guard let property else {
            fail("the key path reads a property \(object.entity.name) does not declare")
            return nil
        }
        guard object === expected else {
            fail("the key path reads \(object.entity.name).\(name(of: property, in: object.entity)) outside one chain of properties"
                + " (a computed property reading several stored ones cannot be used in a query)")
            return nil
        }
        names.append(name(of: property, in: object.entity))
        expected = nil
        lastValueType = valueType
        lastReturned = nil
        lastIsToMany = false
        guard case .relationship(let slot) = property else { return nil }
        let relationship = object.entity.relationships[slot]
        lastIsToMany = relationship.isToMany
        guard !relationship.isToMany else { return nil }
        return destination.map(prototype(of:))
    }

    override func recordReturned(_ value: AttributeValue?) {
        lastReturned = value
    }

    private func name(of property: PropertySlot, in entity: EntityDescription) -> String {
        switch property {
        case .attribute(let slot): entity.attributes[slot].name
        case .relationship(let slot): entity.relationships[slot].name
        }
    }

    private func fail(_ message: String) {
        failure = FetchPredicateError(kind: .unsupported, message: message)
    }
}
