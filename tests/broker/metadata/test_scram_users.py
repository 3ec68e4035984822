"""AlterUserScramCredentials planned into metadata records, checked as Kafka checks them, and
the credentials kept through a snapshot."""

from moldau.broker.metadata.image import MetadataImage
from moldau.broker.metadata.scram_users import ScramChange, plan_changes, stored_credential
from moldau.errors import ErrorCode
from moldau.security.scram import salted_password

SHA256, SHA512 = 1, 2


def upsert(user, mechanism=SHA512, iterations=4096):
    salt = b"salt-" + user.encode()
    return ScramChange(user, mechanism, iterations, salt,
                       salted_password("SCRAM-SHA-512" if mechanism == SHA512
                                       else "SCRAM-SHA-256", "pw", salt, iterations))


def apply(image, records):
    for offset, record in enumerate(records, start=image.offset + 1):
        image.apply(offset, record)


def test_too_few_iterations_are_refused():
    outcome, records = plan_changes(MetadataImage(), [upsert("bob", iterations=1024)])
    assert outcome["bob"].code == ErrorCode.unacceptable_credential and not records


def test_users_stand_or_fall_alone():
    image = MetadataImage()
    outcome, records = plan_changes(image, [
        upsert("alice"), upsert("zoe", SHA256),
        upsert("bob", iterations=1024), upsert("bob", SHA256),
        ScramChange("carol", SHA256), upsert("dave", mechanism=7),
        upsert("erin"), upsert("erin"), upsert("", SHA256)])
    codes = {user: (error.code if error else ErrorCode.none) for user, error in outcome.items()}
    assert codes == {"alice": ErrorCode.none, "zoe": ErrorCode.none,
                     "bob": ErrorCode.duplicate_resource,
                     "carol": ErrorCode.resource_not_found,
                     "dave": ErrorCode.unsupported_sasl_mechanism,
                     "erin": ErrorCode.duplicate_resource,
                     "": ErrorCode.unacceptable_credential}
    apply(image, records)
    assert sorted(image.scram) == [("alice", SHA512), ("zoe", SHA256)]
    assert stored_credential(image, "alice", "SCRAM-SHA-512").iterations == 4096
    assert stored_credential(image, "bob", "SCRAM-SHA-512") is None


def test_deletion_and_snapshot():
    image = MetadataImage()
    apply(image, plan_changes(image, [upsert("alice"), upsert("bob")])[1])
    apply(image, plan_changes(image, [upsert("alice", iterations=1024)])[1])  # refused
    apply(image, plan_changes(image, [ScramChange("bob", SHA512)])[1])
    rebuilt = MetadataImage()
    apply(rebuilt, image.to_records())
    assert sorted(rebuilt.scram) == [("alice", SHA512)]
    assert rebuilt.scram == image.scram
