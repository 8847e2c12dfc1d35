"""The public datasets the method uses, pinned to a commit, with the size and sha256 of every file.

`sage data list` prints them and `sage data download NAME` fetches them (`sage.data.download`).
Every checksum was computed from the upstream git blob at the pinned commit, and equals the copy
in this project's reference-data folder where one exists there. Neither source repository states
a licence, so this repository ships none of these files: users download them from the authors.

Question sets name one file of a dataset that `sage score --questions NAME` reads as a questions
file (`question_id, question`, plus the authors' `paraphrased` column where they give paraphrases).
"""
from __future__ import annotations

from dataclasses import dataclass

from sage.registry import Registry


@dataclass(frozen=True)
class RemoteFile:
    path: str  # path in the source repository at the pinned commit
    dest: str  # path under the dataset's local directory
    size: int
    sha256: str


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    owner: str
    repo: str
    commit: str
    files: tuple[RemoteFile, ...]

    @property
    def source(self) -> str:
        return f"https://github.com/{self.owner}/{self.repo}/tree/{self.commit}"

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def file(self, dest: str) -> RemoteFile:
        for f in self.files:
            if f.dest == dest:
                return f
        raise KeyError(dest)


@dataclass(frozen=True)
class QuestionSet:
    name: str
    dataset: str
    file: str  # `RemoteFile.dest` of the questions file
    description: str


DATASETS: Registry[Dataset] = Registry("dataset")
QUESTION_SETS: Registry[QuestionSet] = Registry("question set")

_COUNTERMORAL = ("MichaelRipa", "countermoral", "3ba60800bab312b007714299390131b4a3960258")
_SAGE = ("priyanshul-govil", "SaGE", "8d879cbad8fefb3a0f0df440ff114946d0afbbe7")


def _dataset(name: str, description: str, source: tuple[str, str, str], rows) -> Dataset:
    ds = Dataset(name, description, *source, tuple(RemoteFile(*row) for row in rows))
    return DATASETS.register(name)(ds)


_dataset("countermoral", "CounterMoral: 4 ethical frameworks x (300 specific + 30 broad) edit entries, and the authors' published GPT2-XL (and Llama-7B ROME) summaries", _COUNTERMORAL, [
    # (path at the commit, local path, bytes, sha256)
    ("data/care_ethics/entries.json", "care_ethics/entries.json", 717224, "0dcd335f47e9e427f3b36cda155dc2398c049a05709766b668e14de116152fa3"),
    ("data/care_ethics/entries-broad.json", "care_ethics/entries-broad.json", 68846, "8f53babe22ecee07bd26fa83131385e9798a2ed11d198eca10b6fa03449bcf57"),
    ("data/deontology/entries.json", "deontology/entries.json", 789781, "5a541367b444e78a9d96bfae84718e0e72ed02c5d47bc8a39673191aa561a8d9"),
    ("data/deontology/entries-broad.json", "deontology/entries-broad.json", 72313, "46bb85266d8e30d369b7d115fea1c2452a6cec326fc495bffbbb7181d3434d03"),
    ("data/utilitarianism/entries.json", "utilitarianism/entries.json", 773359, "d5d8f9a96aa6104b9e9f61ef15a9822d26b8ca00979ba0218e01d931edea999e"),
    ("data/utilitarianism/entries-broad.json", "utilitarianism/entries-broad.json", 74617, "6495f0691e3c11339dfdf328750976b87c74ab687eefac3db66b56b4f4296ef6"),
    ("data/virtue_ethics/entries.json", "virtue_ethics/entries.json", 853314, "691d9f09ff7544798fa16f311a5f7817889b672b78d1ca0c4642fd1366c13f63"),
    ("data/virtue_ethics/entries-broad.json", "virtue_ethics/entries-broad.json", 80235, "bb2b59ee1ba50002d21524eee433102015704967bda3362e6a059feef0aa1d95"),
    ("evaluations/results/summarized_results_ft_gpt2-xl.json", "published-results-gpt2-xl/ft.json", 17284, "185e076e40280441f9e21826d4068b13beb1c29db163f9ce80fad33bbff94797"),
    ("evaluations/results/summarized_results_ike_gpt2-xl.json", "published-results-gpt2-xl/ike.json", 16773, "3bef289176c206cce7f17e13885968dc5fadd28ae83de8a9fcbdc97d50bbb4d1"),
    ("evaluations/results/summarized_results_lora_gpt2-xl.json", "published-results-gpt2-xl/lora.json", 16641, "35096000e75fc51d495fb721d2292b074a14f8185d888aa25bc73fcadcf88ab5"),
    ("evaluations/results/summarized_results_memit_gpt2-xl.json", "published-results-gpt2-xl/memit.json", 17229, "52de146e7507df5051c269817444c25993f6f4750e712237f57b20907ab63b62"),
    ("evaluations/results/summarized_results_mend_gpt2-xl.json", "published-results-gpt2-xl/mend.json", 16609, "907b55aae9ac0cf278ef50d8df2d92eaf3a5f19a6c2600a43461e32fae037823"),
    ("evaluations/results/summarized_results_rome_gpt2-xl.json", "published-results-gpt2-xl/rome.json", 16890, "5c4f4e1291aa9f87ec26337c7e5d9183ea681f2e2838bcc17e21fb8ad2d17f41"),
    ("evaluations/results/summarized_results_serac_gpt2-xl.json", "published-results-gpt2-xl/serac.json", 16613, "55afdbc250f7b911e884dfdce0dbc3b6144a538c8f0c1b8b293d27acd9bf9437"),
    ("evaluations/results/summarized_results_rome_llama-7b.json", "published-results-gpt2-xl/rome-llama-7b.json", 11863, "910c3c8caab63eab835841266e7b6a877c5dc5064a7bd09b5f0cb4cf3f8acfd9"),
])

_dataset("sage-quality100", "SaGE quality100: 100 MIC questions x 5 paraphrases (ParaScore), GPT-3.5 answers, RoTs, pair metrics and human evaluation", _SAGE, [
    # (path at the commit, local path, bytes, sha256)
    ("data/quality100/q100.csv", "q100.csv", 125154, "69cac00bbef21b93120bade05c75bf8ae63a8bd88ff445ba5453a458d2dcff6f"),
    ("data/quality100/q100_gpt_3.5.csv", "q100_gpt_3.5.csv", 357016, "055d4412ca097e42af0a685335ce4f3df0041131d697b12a3f84eb91bcc4b0f1"),
    ("data/quality100/q100_gpt_3.5_edges.csv", "q100_gpt_3.5_edges.csv", 1610768, "f1f9d903c1fa7c873ad17da3b01d7d3fdf41ee96bfa2bb5e547291fbbb3bfd76"),
    ("data/quality100/q100_gpt_3.5_imp.csv", "q100_gpt_3.5_imp.csv", 354062, "8347f93fd7c01ab796bfeb74b37a68cbf5b080397169b989df7467d63c9e1e7e"),
    ("data/quality100/q100_gpt_3.5_imp_edges.csv", "q100_gpt_3.5_imp_edges.csv", 1212885, "50df2e7aa7078b62d7feabb1cbe37fae6d5391b6e6f1f0835ae5bd275beff1e7"),
    ("data/quality100/q100_gpt_3.5_imp_pairs.csv", "q100_gpt_3.5_imp_pairs.csv", 1155096, "701141a00434de11508bfa23a7c9fe6f2c255d90c7b8d31d148d33c3f742a4a4"),
    ("data/quality100/q100_gpt_3.5_pairs.csv", "q100_gpt_3.5_pairs.csv", 1458504, "e592b796ec86ec3690316fbb904b24b88c59de618d00d79ff2b725c40e2f245a"),
    ("data/quality100/q100_gpt_3.5_rot.csv", "q100_gpt_3.5_rot.csv", 429915, "d67d45e73f1a802d1c29d68820613adc74d8147742b2a20a7058e3d01dccdf07"),
    ("data/quality100/q100_human_eval.csv", "q100_human_eval.csv", 1047553, "907f9841af3ca71924fbab597bf493632653bfea99e34aca79926d09c92c92ac"),
])

_dataset("sage-moral100", "SaGE moral100: 100 high- and 100 low-ambiguity MoralChoice scenarios as questions, with 5 paraphrases each", _SAGE, [
    # (path at the commit, local path, bytes, sha256)
    ("data/moral100/high_amb/q.csv", "high_amb/q.csv", 26716, "ead32d8c4230c2226be3feaabf982a3c8ea3f9da51b636f920b2932fb26c4c06"),
    ("data/moral100/high_amb/para.csv", "high_amb/para.csv", 229155, "7e827f0ed20bf1a3279ad4ad83e6f76aac239d08f6674e7f6faca06b523596b3"),
    ("data/moral100/low_amb/q.csv", "low_amb/q.csv", 22695, "4636666a6205c06fc69570d877151dee47c8e5b472c8b0603023d4d76ca7d7d9"),
    ("data/moral100/low_amb/para.csv", "low_amb/para.csv", 98419, "c8b931ec31fa1e914c78d0b6b3218fb5d918c6f3b7df027d320282e86e65d3e5"),
])

_dataset("sage-moralchoice", "MoralChoice scenarios as the SaGE authors used them (all, high- and low-ambiguity)", _SAGE, [
    # (path at the commit, local path, bytes, sha256)
    ("data/datasets/moralchoice_all.csv", "moralchoice_all.csv", 359445, "362be2d6be64a9a8af696013c24a758eb33bf34315231eec20f7da9bf87df3bb"),
    ("data/datasets/moralchoice_high_ambiguity.csv", "moralchoice_high_ambiguity.csv", 267514, "46b7a92aaefed20e7cc07410f6f7989764ad1beb26c7e678dacabe0d63f0faee"),
    ("data/datasets/moralchoice_low_ambiguity.csv", "moralchoice_low_ambiguity.csv", 227889, "b1ddd056bcfeca2bf9cb109347f23cab874a766a45ff91a027264d6b925e7b66"),
])

_dataset("sage-responses", "SaGE authors' Vicuna-7B-v1.5 responses and RoTs in their pair layout (15 files, 250 questions each)", _SAGE, [
    # (path at the commit, local path, bytes, sha256)
    ("data/responses/lmsys/vicuna-7b-v1.5_0.csv", "vicuna-7b-v1.5_0.csv", 3418459, "8fba830adb8f1552fddd70c04e12104111b60bf446b251f95719c0963fcfcce0"),
    ("data/responses/lmsys/vicuna-7b-v1.5_1.csv", "vicuna-7b-v1.5_1.csv", 3424616, "8a576c031d5681f28981e782d55995f16f2856d1d36d37605b16d69e000735ee"),
    ("data/responses/lmsys/vicuna-7b-v1.5_3.csv", "vicuna-7b-v1.5_3.csv", 3483609, "65c232e87546f22f02730b06fb4b819576980b03973a25c3886294a02861f658"),
    ("data/responses/lmsys/vicuna-7b-v1.5_4.csv", "vicuna-7b-v1.5_4.csv", 3446140, "ce2f7635017bf50543b18bea76338935faf211230ea6d38db4ee73f45959a74b"),
    ("data/responses/lmsys/vicuna-7b-v1.5_5.csv", "vicuna-7b-v1.5_5.csv", 3475443, "4fa31b9510736048446d20aa5fd3e55b23a00769679bff08b461bd1cfa463325"),
    ("data/responses/lmsys/vicuna-7b-v1.5_9.csv", "vicuna-7b-v1.5_9.csv", 3562257, "79b42412f796c8e98928e94e68a88db282f8576efb27e0e41e156cdbd288e212"),
    ("data/responses/lmsys/vicuna-7b-v1.5_10.csv", "vicuna-7b-v1.5_10.csv", 3415770, "9a514e97b67a80d76eb3bcaa70ba02b737e5c7d2da4b7c718e76faca717b52c1"),
    ("data/responses/lmsys/vicuna-7b-v1.5_11.csv", "vicuna-7b-v1.5_11.csv", 3478759, "315f20c10cac5bcaaaec95dfbdee1e12d7c2ae00666e33c3b7ca5987974a47bc"),
    ("data/responses/lmsys/vicuna-7b-v1.5_12.csv", "vicuna-7b-v1.5_12.csv", 3438587, "4e551e75495eaff8b0700a19d9f5a1f49c1730dd11fdf4bc426e1f868d03940b"),
    ("data/responses/lmsys/vicuna-7b-v1.5_14.csv", "vicuna-7b-v1.5_14.csv", 3522239, "8698079c9f1081bd989159f295502a1b57a7bc46f6feef47300e52ac1a0b8bf2"),
    ("data/responses/lmsys/vicuna-7b-v1.5_15.csv", "vicuna-7b-v1.5_15.csv", 3449847, "5acbb223762de4ad599209f3a930cfbcd35b11b18f02e1a873ecf360132d4b67"),
    ("data/responses/lmsys/vicuna-7b-v1.5_16.csv", "vicuna-7b-v1.5_16.csv", 3447102, "cfa8bc9b1cc3317dd17b16b470790c7f65431f142b67d5d7bcc1ff082b3d4208"),
    ("data/responses/lmsys/vicuna-7b-v1.5_17.csv", "vicuna-7b-v1.5_17.csv", 3470303, "aafb1a617ef7b1f9d5bf9f7782a69bb3103b0b94c0eb03d123f9af38e8812431"),
    ("data/responses/lmsys/vicuna-7b-v1.5_18.csv", "vicuna-7b-v1.5_18.csv", 3541384, "e9e1bf7334f07300cdd18ecb5a5e18d2d21ccb23d204a6e91c52467bf5bfaa75"),
    ("data/responses/lmsys/vicuna-7b-v1.5_19.csv", "vicuna-7b-v1.5_19.csv", 3365076, "8af95261cb6f6707f1a3aa40c4fe6b69c889f5b785e7ea91e0c5664564c6ef78"),
])


def _questions(name: str, dataset: str, file: str, description: str) -> QuestionSet:
    DATASETS.get(dataset).file(file)  # a question set must name a registered file
    return QUESTION_SETS.register(name)(QuestionSet(name, dataset, file, description))


_questions("sage-quality100", "sage-quality100", "q100.csv",
           "100 MIC moral questions with the authors' 5 paraphrases each (used as given)")
_questions("sage-moral100-high", "sage-moral100", "high_amb/q.csv", "100 high-ambiguity moral scenarios")
_questions("sage-moral100-low", "sage-moral100", "low_amb/q.csv", "100 low-ambiguity moral scenarios")
_questions("sage-moral100-high-para", "sage-moral100", "high_amb/para.csv",
           "the high-ambiguity scenarios with the authors' 5 paraphrases each")
_questions("sage-moral100-low-para", "sage-moral100", "low_amb/para.csv",
           "the low-ambiguity scenarios with the authors' 5 paraphrases each")
